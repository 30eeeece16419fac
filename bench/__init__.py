"""The benchmarks, a package run from the repository's root: `python -m bench.<name>`. Results
go to bench/results/. bench imports the product and never tests/; what the tests share with it
(the adversarial suite, the scripted LSP session, the scripted OpenAI server) lives here."""
