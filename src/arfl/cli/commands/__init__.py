"""One module per command; each registers itself on the typer app in ``arfl.cli.app``."""
