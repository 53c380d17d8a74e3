"""The machinery: what makes any task's runs repeat, resume and record themselves. You should not
need to edit it; task.py, config.py and train.py are where a project changes.

    plan.py         the checks of a train command, before anything changes
    loop.py         training steps (accumulation, clipping, no per-step wait) and evaluation
    contract.py     the task's promises, checked on a few samples before a run starts
    optim.py        the optimizer and the learning-rate schedule
    loader.py       data order and per-sample randomness as functions of the seed
    repro.py        seeds, keyed seeds, deterministic kernels, weight hashes
    checkpoint.py   what a checkpoint holds, writing it, finding the newest intact one
    run_folder.py   the files a run writes;  runs.py: reading them back and comparing runs
    environment.py  what a run records of the machine and software
    files.py        atomic writes;  cli.py: one-line errors of every command
    launch.py       starting the train command in a fresh process
    endings.py      how a run ends early: the line it prints and its exit status
    world_sizes.py  the history of world sizes of a run resumed on another number of processes
    statistics.py   means and 95 % intervals across seeds
    device.py, distributed.py, precision.py, signals.py, tracking.py
    startup.py      what the train process needs set before torch loads (hash seed, CPU kernel pins)
"""
