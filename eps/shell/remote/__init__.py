"""Getting a job onto a machine and its results back: eps's own ssh key pair
(``keys``), the files of a workdir worth shipping (``ignore``), commands over ssh
or a login prefix or locally (``ssh``), rsync transfers (``sync``) and the job's
life in its dispatch root: stage, start, probe, wait, pull (``job``).

Transport is the system ``ssh`` and ``rsync``.  Every function that can fail
returns ``Result[..., RemoteFailure]``; every process is run through an
injectable runner (production default: :func:`eps.shell.remote.process.run_process`).
Nothing here imports the rest of ``eps.shell``.
"""
