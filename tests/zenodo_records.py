"""Records in the published Zenodo format (the paper's), shared by the importer's tests and the reader attacks."""

from __future__ import annotations


def published_steps(count: int) -> list[dict]:
    """Steps as the paper describes the record: code, output, time, memory, variables, hash index."""
    return [
        {
            "code": f"x = {i}\nprint(x * 2)",
            "output": f"{i * 2}\n",
            "execution_time": 0.25 + i,
            "memory_bytes": 1_000_000 + i,
            "runtime_variables": {"x": {"type": "int", "size": 28, "repr": str(i)}},
            "hash_index": f"hash{i}",
        }
        for i in range(count)
    ]
