"""The front door: the `esnfed` Typer app, one command per pipeline stage. Parses options, shows
progress and summaries, maps errors to exit codes; computes nothing itself."""
