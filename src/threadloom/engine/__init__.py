"""The embedded SQLite engine (apsw): one file, typed tables, one transaction per put.

Imports point downward: this package uses `protocol` and `core`, never the LangGraph
adapters above it. All SQL of threadloom lives in this package. Its rooms, lowest first
(a room imports only the rooms before it; tests/test_layers.py checks it):

- `sql.py`: typed helpers over apsw.
- `format/`: schema and migrations, table descriptors, seals, heads, body framing,
  the text index's tokenizer, recognizing what a path holds.
- `foreign/`: other applications' files read for migration (naas, LangGraph's SQL).
- `content/`: the content store (blocks, inline bodies, dictionaries, training).
- `threads/`: the thread index every write keeps.
- `file.py`: one file per path and process (connections, transactions, migrations).
- `checkpoints/`: one scope's writer, reader, values, document view, maintenance.
- `items/`: the Store's items, filter index, text and vector search.
- `conversations/`: tails, history, leases, erasure, retention.
- `checks/`: verify, doctor's figures, compact, the viewer's reads.
- `checkpoint_store.py`: `CheckpointStore`, the parts of one scope wired together.

Outer layers import `threadloom.engine` and the rooms' packages, never a room's modules.
"""

from threadloom.engine.changes import Changes
from threadloom.engine.checkpoint_store import CheckpointStore
from threadloom.engine.file import MEMORY, File

__all__ = ["MEMORY", "Changes", "CheckpointStore", "File"]
