"""Words shared by every face (report text, TUI, verdict fixes): capacity and what-if. Imports nothing of ours."""
