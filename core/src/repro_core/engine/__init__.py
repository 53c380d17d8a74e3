"""The run machinery that needs no project: what the research projects vendor as their engine's
core. Each module takes what it needs of a project (the settings, the task, the program's name)
as arguments, and imports nothing above this package but `..utils`.

    files.py        atomic writes (a kill never leaves half a file), fsync of a folder
    run_folder.py   the files a run writes, the folder's one-writer lock
    runs.py         reading a run folder back and comparing runs
    checkpoint.py   what a checkpoint holds, writing it, finding the newest intact one
    contract.py     a task's promises, checked on a few samples before a run starts
    loader.py       utils/data.py's loader grown for a run: each rank's share, a resumed epoch, Ctrl-C
    loop.py         a step's micro-batch windows and their keyed draws, its metrics rows
    optim.py        the optimizer's parameter groups and the learning-rate schedule
    precision.py    autocast and the gradient scaler
    distributed.py  torchrun, DDP and FSDP
    signals.py      stopping cleanly on SIGTERM and Ctrl-C; never outliving the parent
    startup.py      what a process needs set before torch loads (hash seed, CPU kernel pins)
    statistics.py   means and 95 % intervals across seeds
    tracking.py     offline trackers (TensorBoard): every metrics row to each
    world_sizes.py  the world sizes a resumed run went through
"""
