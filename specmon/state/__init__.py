"""What specmon keeps across its own restarts: the configuration epochs of every target
(:mod:`specmon.state.epochs`) and the file they are written to (:mod:`specmon.state.store`).
Pure logic and file I/O only; the daemon decides when to read and write
(:mod:`specmon.daemon.persist`)."""
