/* The load generator's per-token read, in C: one whole SSE chunk of a stream's learnt shape.
 *
 * gevent's hub calls a stream's reader once per token of every open stream. In Python that
 * callback (recvmsg, its ancillary list, the kernel stamp, the chunked framing, the SSE
 * template compare, the state's updates) cost about as much user time as the kernel's own
 * receive path; here it costs a fraction of it. It does only the case that is nearly every
 * read: exactly one chunk "<hex>\r\n<payload>\r\n" whose payload is the stream's template
 * (the bytes before and after a token's text, learnt by loadgen.sse.SseParser) around a text
 * with no quote or newline. Everything else (the first token, a chunk split across reads,
 * several in one, usage, errors, the end of the body, a socket error) goes to the Python
 * reader, byte for byte as it would have without this module, and the Python reader says
 * whether the next read may take this path again (it "arms" it with the template).
 *
 * The state it counts ends in the Python objects' own (the Stream and its parser's
 * StreamState): it appends each gap to the state's list at once, and hands its other counts
 * over before Python next reads the stream and when the stream is let go, so the Python
 * reader and the records see one timeline whichever path read a token.
 * Stamps are time.perf_counter() times (CLOCK_MONOTONIC on Linux), taken from the kernel's
 * receive stamp (SO_TIMESTAMPNS, CLOCK_REALTIME) as loadgen.rxstamp.to_perf does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define RECV_BYTES 65536

static PyObject *s_last, *s_events, *s_nbytes, *s_end;
/* Filled and copied out (or consumed) before anything can run another reader: the GIL is
 * held throughout and the socket is read without waiting. */
static char rbuf[RECV_BYTES];

typedef struct {
    PyObject_HEAD
    int fd;
    int stamped;        /* the socket carries the kernel's receive stamps */
    double max_age;     /* a stamp further than this from now is not trusted */
    PyObject *stream;   /* loadgen.worker_reader.Stream */
    PyObject *state;    /* its parser's StreamState */
    PyObject *slow;     /* slow(data | None, stamp, kernel, errno) -> (pre, tail, gaps) | None */
    PyObject *pre;      /* armed: the template's bytes before a text */
    PyObject *tail;     /* armed: its bytes after it, with the blank line */
    PyObject *gaps;     /* armed: state.gaps */
    /* What the C path counted since it last handed its counts to the Python objects (at
     * the next read Python takes, and when the stream is let go): setting their attributes
     * at each token cost more than the rest of the read. */
    long events;        /* tokens, for state.token_events */
    Py_ssize_t nbytes;  /* payload bytes, for stream.nbytes */
    double end;         /* the last read's stamp, for stream.end (where nbytes is not 0) */
    double last;        /* the last token's stamp, for state.last_token_at */
    int has_last;       /* last holds it (read from state once, then kept here) */
    long round;         /* the last round this stream was read in (see Gather) */
    int live;           /* it has been read: each round should bring it a token */
} Reader;

/* Gathering a step's tokens. An engine writes one token to every running stream at each
 * step's end, one socket after another, and a hub that polls as soon as one turns readable
 * wakes several times a step for a few tokens each. libev's io collect interval makes the
 * hub sleep before each poll instead, to take what arrived meanwhile in one wake-up; but it
 * sleeps before every poll, the one that then waits for the next step too: a wake-up of its
 * own each step. So the interval is set only while the round is incomplete: a round holds at
 * most one read of each live stream, and ends when every live stream has been read or one is
 * read again. Once every stream has had its token the next one is a step away, and the poll
 * waits for it without the sleep. libev still does the sleeping (clipped to its timers and
 * skipped when callbacks are pending). All of it runs in the hub's thread, under the GIL. */
typedef void (*set_collect_fn)(void *loop, double interval);
static struct {
    set_collect_fn set;  /* libev's ev_set_io_collect_interval, and the hub's loop */
    void *loop;
    double interval;     /* the interval an incomplete round gathers for; 0: none */
    double applied;      /* what libev was last told */
    long round;
    Py_ssize_t live;     /* streams read at least once and not let go */
    Py_ssize_t seen;     /* of those, the ones read this round */
} gather = {NULL, NULL, 0.0, 0.0, 1, 0, 0};

static void apply_gather(void) {
    double want = gather.seen < gather.live ? gather.interval : 0.0;
    if (want != gather.applied && gather.set != NULL) {
        gather.set(gather.loop, want);
        gather.applied = want;
    }
}

static void counted(Reader *r) {
    if (!r->live) {
        r->live = 1;
        gather.live++;
    } else if (r->round == gather.round) { /* read again: a new round */
        gather.round++;
        gather.seen = 0;
    }
    if (r->round != gather.round) {
        r->round = gather.round;
        gather.seen++;
    }
    apply_gather();
}

static void uncounted(Reader *r) {
    if (r->live) {
        r->live = 0;
        gather.live--;
        if (r->round == gather.round)
            gather.seen--;
        apply_gather();
    }
}

static void disarm(Reader *r) {
    Py_CLEAR(r->pre);
    Py_CLEAR(r->tail);
    Py_CLEAR(r->gaps);
}

static int Reader_traverse(Reader *r, visitproc visit, void *arg) {
    Py_VISIT(r->stream);
    Py_VISIT(r->state);
    Py_VISIT(r->slow);
    Py_VISIT(r->pre);
    Py_VISIT(r->tail);
    Py_VISIT(r->gaps);
    return 0;
}

static int Reader_clear(Reader *r) {
    uncounted(r);
    Py_CLEAR(r->stream);
    Py_CLEAR(r->state);
    Py_CLEAR(r->slow);
    disarm(r);
    return 0;
}

static void Reader_dealloc(Reader *r) {
    PyObject_GC_UnTrack(r);
    Reader_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static int Reader_init(Reader *r, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "stamped", "max_age", "stream", "state", "slow", NULL};
    int fd, stamped;
    double max_age;
    PyObject *stream, *state, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ipdOOO", names, &fd, &stamped, &max_age,
                                     &stream, &state, &slow))
        return -1;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "slow must be callable");
        return -1;
    }
    r->fd = fd;
    r->stamped = stamped;
    r->max_age = max_age;
    Py_INCREF(stream);
    Py_XSETREF(r->stream, stream);
    Py_INCREF(state);
    Py_XSETREF(r->state, state);
    Py_INCREF(slow);
    Py_XSETREF(r->slow, slow);
    disarm(r);
    return 0;
}

/* What the Python reader returned: None leaves the fast path off, (pre, tail, gaps) arms it. */
static int arm(Reader *r, PyObject *how) {
    disarm(r);
    if (how == Py_None)
        return 0;
    if (!PyTuple_Check(how) || PyTuple_GET_SIZE(how) != 3 ||
        !PyBytes_Check(PyTuple_GET_ITEM(how, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(how, 1)) ||
        !PyList_Check(PyTuple_GET_ITEM(how, 2))) {
        PyErr_SetString(PyExc_TypeError, "the reader arms with (bytes, bytes, list) or None");
        return -1;
    }
    r->pre = Py_NewRef(PyTuple_GET_ITEM(how, 0));
    r->tail = Py_NewRef(PyTuple_GET_ITEM(how, 1));
    r->gaps = Py_NewRef(PyTuple_GET_ITEM(how, 2));
    return 0;
}

static int add_to(PyObject *obj, PyObject *name, Py_ssize_t add);

/* Hand the counts to the Python objects: before Python reads or parses anything of the
 * stream, and when it is let go. */
static int flush(Reader *r) {
    r->has_last = 0;
    if (r->nbytes == 0) /* each counted read brings payload, so no token either */
        return 0;
    long events = r->events;
    Py_ssize_t nbytes = r->nbytes;
    r->events = 0;
    r->nbytes = 0;
    if (r->stream == NULL)
        return 0;
    if (add_to(r->stream, s_nbytes, nbytes) < 0)
        return -1;
    PyObject *end = PyFloat_FromDouble(r->end);
    if (end == NULL)
        return -1;
    int rc = PyObject_SetAttr(r->stream, s_end, end);
    Py_DECREF(end);
    if (rc < 0 || events == 0)
        return rc;
    PyObject *last = PyFloat_FromDouble(r->last);
    if (last == NULL)
        return -1;
    rc = PyObject_SetAttr(r->state, s_last, last);
    Py_DECREF(last);
    return rc < 0 ? -1 : add_to(r->state, s_events, events);
}

static PyObject *call_slow(Reader *r, PyObject *data, double stamp, int kernel, int err) {
    if (flush(r) < 0)
        return NULL;
    PyObject *how = PyObject_CallFunction(r->slow, "Odii", data, stamp, kernel, err);
    if (how == NULL)
        return NULL;
    int bad = arm(r, how);
    Py_DECREF(how);
    if (bad)
        return NULL;
    Py_RETURN_NONE;
}

static inline double seconds(const struct timespec *t) {
    return (double)t->tv_sec + (double)t->tv_nsec * 1e-9;
}

/* The payload's length if d[0:n] is one whole chunk of the armed shape, else -1; *text: it
 * carries a text (an empty one is an event without a token). As loadgen.chunked's and
 * loadgen.sse's fast paths read it. */
static Py_ssize_t one_token_chunk(Reader *r, const char *d, Py_ssize_t n, int *text) {
    Py_ssize_t i = 0;
    size_t size = 0;
    for (; i < n && i < 16; i++) {
        char c = d[i];
        int v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v = c - 'A' + 10;
        else
            break;
        size = size * 16 + (size_t)v;
    }
    if (i == 0 || i + 1 >= n || d[i] != '\r' || d[i + 1] != '\n')
        return -1;
    Py_ssize_t start = i + 2;
    if (size == 0 || size != (size_t)(n - start - 2) || d[n - 2] != '\r' || d[n - 1] != '\n')
        return -1;
    const char *p = d + start;
    Py_ssize_t m = (Py_ssize_t)size;
    Py_ssize_t np = PyBytes_GET_SIZE(r->pre), nt = PyBytes_GET_SIZE(r->tail);
    if (m < np + nt || memcmp(p, PyBytes_AS_STRING(r->pre), (size_t)np) != 0 ||
        memcmp(p + m - nt, PyBytes_AS_STRING(r->tail), (size_t)nt) != 0)
        return -1;
    for (Py_ssize_t k = np; k < m - nt; k++)
        if (p[k] == '"' || p[k] == '\n')
            return -1;
    *text = m - nt > np;
    return m;
}

/* obj.name += add, for an int attribute. */
static int add_to(PyObject *obj, PyObject *name, Py_ssize_t add) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *w = PyLong_FromSsize_t(n + add);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    return rc;
}

static int count_token(Reader *r, double stamp) {
    if (!r->has_last) {
        PyObject *last = PyObject_GetAttr(r->state, s_last);
        if (last == NULL)
            return -1;
        r->last = PyFloat_AsDouble(last);
        Py_DECREF(last);
        if (r->last == -1.0 && PyErr_Occurred())
            return -1;
        r->has_last = 1;
    }
    PyObject *gap = PyFloat_FromDouble(stamp - r->last);
    if (gap == NULL)
        return -1;
    int rc = PyList_Append(r->gaps, gap);
    Py_DECREF(gap);
    if (rc < 0)
        return -1;
    r->events++;
    r->last = stamp;
    return 0;
}

/* The hub's callback: the stream's socket is readable. */
static PyObject *Reader_call(Reader *r, PyObject *args, PyObject *kw) {
    if (r->stream == NULL) /* let go of (close): a late wake-up */
        Py_RETURN_NONE;

    char control[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {rbuf, RECV_BYTES};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (r->stamped) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
    }
    ssize_t n = recvmsg(r->fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            Py_RETURN_NONE;
        return call_slow(r, Py_None, 0.0, 0, errno);
    }
    if (n > 0)
        counted(r);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    double stamp = seconds(&mono);
    int kernel = 0;
    if (r->stamped) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
                struct timespec k, wall;
                memcpy(&k, CMSG_DATA(c), sizeof k);
                clock_gettime(CLOCK_REALTIME, &wall);
                /* The wall-clock stamp as a monotonic time: less the offset between them. */
                double at = seconds(&k) - (seconds(&wall) - stamp);
                if (stamp - r->max_age <= at && at <= stamp + 1e-3) {
                    kernel = 1;
                    if (at < stamp)
                        stamp = at;
                }
                break;
            }
        }
    }
    int text = 0;
    Py_ssize_t payload = (n > 0 && r->pre != NULL) ? one_token_chunk(r, rbuf, n, &text) : -1;
    if (payload < 0) {
        PyObject *data = PyBytes_FromStringAndSize(rbuf, n);
        if (data == NULL)
            return NULL;
        PyObject *res = call_slow(r, data, stamp, kernel, 0);
        Py_DECREF(data);
        return res;
    }
    if (text && count_token(r, stamp) < 0)
        return NULL;
    r->nbytes += payload;
    r->end = stamp;
    Py_RETURN_NONE;
}

static PyObject *Reader_arm(Reader *r, PyObject *how) {
    if (arm(r, how) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_close(Reader *r, PyObject *unused) {
    int rc = flush(r);
    Reader_clear(r);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_armed(Reader *r, void *unused) {
    return PyBool_FromLong(r->pre != NULL);
}

/* One value as "%.6f" prints it, into out (room for 24 characters); its length, or -1 where it
 * is not a float this handles (not finite, a million or over): Python formats it then. Under a
 * million the product below is within 1e-4 of the exact one, so only a value within 1e-3 of
 * a half can round differently. */
static int fixed6_one(double x, char *out) {
    if (!isfinite(x) || fabs(x) >= 1e6)
        return -1;
    double s = fabs(x) * 1e6;
    double whole = floor(s);
    /* Near a half the product's own rounding could tip it: printf's rounding of the exact
     * value decides there, as Python's (both round the binary value correctly). */
    if (fabs(s - whole - 0.5) < 1e-3)
        return snprintf(out, 24, "%.6f", x);
    long long us = (long long)whole + (s - whole > 0.5);
    long long ip = us / 1000000, fp = us % 1000000;
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + ip % 10);
        ip /= 10;
    } while (ip > 0);
    int k = 0;
    if (signbit(x))  /* as printf: a negative that rounds to zero, and -0.0, keep the sign */
        out[k++] = '-';
    while (n > 0)
        out[k++] = tmp[--n];
    out[k++] = '.';
    for (int d = 5; d >= 0; d--) {
        out[k + d] = (char)('0' + fp % 10);
        fp /= 10;
    }
    return k + 6;
}

/* ",".join("%.6f" % g for g in gaps): a record's gaps, a float a token, are most of the cost
 * of writing its line. None where any item is not a float fixed6_one handles. */
static PyObject *fixed6(PyObject *module, PyObject *seq) {
    PyObject *fast = PySequence_Fast(seq, "fixed6 takes a list or tuple of floats");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    char *buf = PyMem_Malloc((size_t)(n > 0 ? n : 1) * 25);
    if (buf == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    Py_ssize_t len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int w = PyFloat_CheckExact(items[i]) ? fixed6_one(PyFloat_AS_DOUBLE(items[i]), buf + len) : -1;
        if (w < 0 || w > 24) {
            PyMem_Free(buf);
            Py_DECREF(fast);
            Py_RETURN_NONE;
        }
        len += w;
        buf[len++] = ',';
    }
    PyObject *res = PyUnicode_DecodeASCII(buf, len > 0 ? len - 1 : 0, NULL);
    PyMem_Free(buf);
    Py_DECREF(fast);
    return res;
}

static PyObject *bind_collect(PyObject *module, PyObject *args) {
    unsigned long long fn, loop;
    if (!PyArg_ParseTuple(args, "KK", &fn, &loop))
        return NULL;
    gather.set = (set_collect_fn)(uintptr_t)fn;
    gather.loop = (void *)(uintptr_t)loop;
    gather.applied = -1.0; /* unknown: told at the next change */
    apply_gather();
    Py_RETURN_NONE;
}

static PyObject *set_gather(PyObject *module, PyObject *arg) {
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    gather.interval = v > 0.0 && isfinite(v) ? v : 0.0;
    apply_gather();
    Py_RETURN_NONE;
}

static PyObject *gather_state(PyObject *module, PyObject *unused) {
    return Py_BuildValue("{s:d,s:d,s:n,s:n,s:l}", "interval", gather.interval, "applied",
                         gather.applied, "live", gather.live, "seen", gather.seen, "round",
                         gather.round);
}

static PyMethodDef module_methods[] = {
    {"bind_collect", (PyCFunction)bind_collect, METH_VARARGS,
     "bind_collect(ev_set_io_collect_interval's address, the libev loop's): where to apply it."},
    {"set_gather", (PyCFunction)set_gather, METH_O,
     "set_gather(seconds): libev's io collect interval while a round is incomplete; 0: none."},
    {"gather_state", (PyCFunction)gather_state, METH_NOARGS,
     "gather_state() -> {interval, applied, live, seen, round}."},
    {"fixed6", (PyCFunction)fixed6, METH_O,
     "fixed6(floats) -> str | None: ','.join('%.6f' % x for x in floats); None: format in Python."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Reader_methods[] = {
    {"arm", (PyCFunction)Reader_arm, METH_O, "arm((pre, tail, gaps) | None): what slow() returns."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "Let go of the stream: every later call is a no-op."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Reader_held(Reader *r, void *unused) {
    return PyLong_FromSsize_t(r->nbytes);
}

static PyGetSetDef Reader_getset[] = {
    {"held", (getter)Reader_held, NULL, "Payload bytes read but not yet added to stream.nbytes.", NULL},
    {"armed", (getter)Reader_armed, NULL, "Whether the next read may take the C path.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "loadgen._hotread.Reader",
    .tp_doc = "Reader(fd, stamped, max_age, stream, state, slow): one stream's hub callback.",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_call = (ternaryfunc)Reader_call,
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
};

static struct PyModuleDef hotread_module = {
    PyModuleDef_HEAD_INIT, "loadgen._hotread",
    "The load generator's per-token read in C (see loadgen/worker_reader.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__hotread(void) {
    s_last = PyUnicode_InternFromString("last_token_at");
    s_events = PyUnicode_InternFromString("token_events");
    s_nbytes = PyUnicode_InternFromString("nbytes");
    s_end = PyUnicode_InternFromString("end");
    if (!s_last || !s_events || !s_nbytes || !s_end)
        return NULL;
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&hotread_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
