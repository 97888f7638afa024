"""``python -m grader autograde``: grade a folder of submissions, fast and safely.

The pieces, in the order a submission meets them:

- ``sources``: the source assignments and their solution run (which checks each test makes);
- ``submissions``: find the submitted notebooks; ``folder_walk``: walk their folders once (the
  walk is both what is fingerprinted and what a job receives); ``notebook_file``: read them
  (invalid ones get a status);
- ``sanitize``: nbgrader's own preprocessors restore test and locked cells from the source
  (``nbgrader_adapters``: every place nbgrader's internals are adapted, for one call each);
- ``scheduling``: jobs in flight, ``workers`` at a time, on an ``executor.Executor``;
- ``sandbox`` (the fork server's loop), ``fork_protocol``, ``fork_server``, ``fork_child``,
  ``fork_client``, ``confine``, ``mount_tree``, ``seccomp``, ``cgroups``, ``cgroup_mounts``
  and ``execution``: one fresh child process per notebook, forked from a server that has
  already imported numpy and torch (``preload``), confined with limits and a timeout
  (``distributed``, ``dask_worker`` and ``job_pack``: the same jobs on Dask);
- ``child_report``: the one channel back from the child, size-capped and validated;
- ``judging``: the parent re-decides every check from the raw arrays the child sent back;
- ``delegation``: which solutions hand their exercise to an implementation of it;
- ``scoring``: the rules that turn a finished job into each test's points (pure functions);
- ``results``: the typed records (``TestResult``, ``SubmissionResult``, ``Summary``, exit codes);
- ``pipeline``: the run itself: prepare, schedule, score, save; ``session``: one gradebook,
  executor and prepared sources kept open across batches (``grader.watch`` grades on submit);
- ``course_dir`` and ``feedback``: OUT as an nbgrader course directory (``source/``,
  ``feedback/`` in nbgrader's layout, delivered through the exchange); ``permissions``: the
  modes of what a run writes;
- ``gradebook``: the run's one open gradebook and the source's cell records, read once;
- ``reports``: results.json, feedback.html and grades.csv.

The statuses and the rule for when a cell passed are ``attention_learner.cell_rules``, shared
with the learner's own check.
"""
