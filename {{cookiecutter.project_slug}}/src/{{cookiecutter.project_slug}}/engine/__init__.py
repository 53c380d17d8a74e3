"""The machinery: what makes any task's runs repeat, resume and record themselves. You should not
need to edit it; task.py, config.py and train.py are where a project changes.

    plan.py         the checks of a train command, before anything changes
    loop.py         the loop's machinery: each step's micro-batches, its metrics rows (no per-step wait)
    contract.py     the task's promises, checked on a few samples before a run starts
    optim.py        the optimizer and the learning-rate schedule
    checkpoint.py   what a checkpoint holds, writing it, finding the newest intact one
    run_folder.py   the files a run writes;  runs.py: reading them back and comparing runs
    environment.py  what a run records of the machine and software
    fingerprint.py  this machine's digests of the operations a run depends on (doctor --fingerprint)
    files.py        atomic writes;  cli.py: one-line errors of every command
    launch.py       starting the train command in a fresh process
    endings.py      how a run ends early: the line it prints and its exit status
    world_sizes.py  the history of world sizes of a run resumed on another number of processes
    statistics.py   means and 95 % intervals across seeds
    distributed.py, precision.py, signals.py, tracking.py
    startup.py      what the train process needs set before torch loads (hash seed, CPU kernel pins)

The seeds, the deterministic kernels, the weight hash, the device and the seeded loader are in
utils/ (repro.py, device.py, data.py): what any project could copy, and the teaching size has too.
"""
