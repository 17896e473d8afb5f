"""One home for pausing the garbage collector around state conversions."""

import contextlib
import gc


@contextlib.contextmanager
def no_gc():
    """Pauses the cyclic garbage collector while a state is converted: making
    thousands of objects would otherwise run collections that traverse the
    whole state again and again (nothing made here forms cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
