from gnnscale.cli import entry_point

entry_point()
