"""Pipeline stages: each reads its inputs and params, calls the core, and writes its outputs
atomically. All file I/O lives here (or in esnfed_core.data for the dataset formats)."""
