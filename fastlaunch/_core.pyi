# Type stub for the Cython extension _core: what the public API exposes of it (the dispatcher
# every compiled function and loaded program is).  Other names are internal.
from typing import Any

class Dispatcher:
    max_entries: int
    def __init__(self, static_positions: tuple[int, ...] = ..., replay: bool = ...,
                 max_entries: int = ...) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def __getattr__(name: str) -> Any: ...
