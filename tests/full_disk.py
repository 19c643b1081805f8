"""A child interpreter whose writes fail as on a full disk: a file size limit (RLIMIT_FSIZE) makes a write
past 20,000 bytes fail with EFBIG, without a file system to fill. ``python -c FULL_DISK <gnnscale CLI args>``."""

FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
from gnnscale.cli import main
sys.exit(main(sys.argv[1:]))
"""
