"""Readers of other applications' files, for `threadloom.migrate`: the naas document
service's SQLite file (`naas_file.py`) and the statements run on LangGraph's own
databases (`foreign.py`).

The only SQL of threadloom outside `engine/` lives here, fenced: it reads what other
applications wrote, through their documented formats, and never writes to their files
(tests/test_layers.py names this folder as the one exception).
"""
