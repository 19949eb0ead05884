"""The adapters' wing: everything that speaks LangGraph, and the only package that
imports it (tests/test_layers.py checks it).

- `saver.py`: `Saver` and `AsyncSaver`, the checkpoint savers; `tuples.py`: the
  serializers and checkpoint tuples LangGraph defines.
- `store.py`, `store_ops.py` and `store_ttl.py`: `Store` and `AsyncStore`, the LangGraph
  Store (its ops; its TTL sweeps).
- `memories.py`: profiles, content-addressed keys and one owner's view over any store.
- `conversations.py` and `retention.py`: the saver's conversation records and
  retention policy.
- `migration/`: `threadloom.migrate`, from LangGraph's savers and stores and from naas;
  the files of other applications are read by the engine's `foreign/` room.
- `demo.py`: the agent of `threadloom demo`.

Others use the public names through `threadloom` (`from threadloom import Saver`), which
loads this wing on first use so the light commands never import LangGraph. The CLI
imports `migration`, `retention` and `demo`, and the naas adapter `saver`, by module.
"""
