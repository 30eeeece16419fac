"""The pygls language server: documents, jobs, diagnostics, hover, code actions."""
