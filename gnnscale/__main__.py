"""``python -m gnnscale`` and the ``gnnscale`` command."""

import gc


def main() -> None:
    # Start-up imports torch, numba and scipy: hundreds of thousands of long-lived objects, and the cyclic
    # collector's full passes over them while they are being made cost each process about a second of
    # CPU, time every worker of a launch spends before its first batch. They are not garbage: collect
    # nothing while importing, then freeze what the imports made, so that later passes skip it.
    gc.disable()
    try:
        from gnnscale.cli import entry_point
    finally:
        gc.freeze()
        gc.enable()
    entry_point()


if __name__ == "__main__":
    main()
