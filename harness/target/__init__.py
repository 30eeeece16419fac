"""What a kernel is checked against: targets (the `<stem>.cu` beside its reference and
configured targets), references and their signatures, launch conventions (plain `extern "C"`
launchers, torch extensions, KernelBench solutions), loading a candidate, trial input sets,
memory planning and the numerical comparison. Modules that touch tensors run only in a
worker."""
