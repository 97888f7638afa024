"""``python -m grader autograde``: grade a folder of submissions, fast and safely.

The pieces, in the order a submission meets them:

- ``sources``: the source assignments and their solution run (which checks each test makes);
- ``submissions``: find the submitted notebooks, walk their folders once (the walk is both
  what is fingerprinted and what a job receives) and read them (invalid ones get a status);
- ``sanitize``: nbgrader's own preprocessors restore test and locked cells from the source;
- ``scheduling``: jobs in flight, ``workers`` at a time;
- ``sandbox``, ``confine``, ``cgroups`` and ``execution``: one fresh child process per
  notebook, forked from a server that has already imported numpy and torch (``preload``),
  confined with limits and a timeout (``distributed``: the same jobs on Dask);
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
- ``gradebook``: nbgrader's gradebook preprocessors, sharing one open gradebook;
- ``reports``: results.json, feedback.html and grades.csv.

The statuses and the rule for when a cell passed are ``attention_learner.cell_rules``, shared
with the learner's own check.
"""
