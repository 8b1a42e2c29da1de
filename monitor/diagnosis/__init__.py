"""The diagnosis: a window in, verdicts out (cause, confidence, scope, evidence, fix, since).

Pure functions (``diagnose``) plus one stateful wrapper (``Diagnoser``) that adds
hysteresis. No I/O here except ``load_thresholds``/``load_caps``, which read a
config file the user names.
"""

from monitor.diagnosis.diagnose import Diagnosis, diagnose
from monitor.diagnosis.hysteresis import Diagnoser
from monitor.diagnosis.peaks import GPU_PEAKS, GpuPeak, match_gpu
from monitor.diagnosis.thresholds import Caps, Thresholds, load_caps, load_thresholds
from monitor.diagnosis.verdict import CAUSES, Cause, Evidence, Verdict

__all__ = [
    "CAUSES",
    "GPU_PEAKS",
    "Cause",
    "Caps",
    "Diagnoser",
    "Diagnosis",
    "Evidence",
    "GpuPeak",
    "Thresholds",
    "Verdict",
    "diagnose",
    "load_caps",
    "load_thresholds",
    "match_gpu",
]
