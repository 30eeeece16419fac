"""The harness worker process: `python -m kernelblaster.harness.worker` reads one
WorkerRequest, runs build → verify → time → profile, and writes progress and one
WorkerResponse (serve.py); a spare worker prepares its expected request's reference side ahead
(reference_ahead.py). The top of harness: only worker processes import it."""
