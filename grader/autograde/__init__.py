"""``python -m grader autograde``: grade a folder of submissions, fast and safely.

The pieces, in the order a submission meets them:

- ``submissions``: find the submitted notebooks and read them (invalid ones get a status);
- ``sanitize``: nbgrader's own preprocessors restore test and locked cells from the source;
- ``sandbox``, ``confine`` and ``execution``: one fresh child process per notebook, forked
  from a server that has already imported numpy and torch (``preload``), confined in
  namespaces of its own with limits and a timeout (``distributed``: the same jobs on Dask);
- ``child_report``: the one channel back from the child, size-capped and validated;
- ``cells``: what a cell is (test, solution) and the statuses of cells and submissions;
- ``judging``: the parent re-decides every check from the raw arrays the child sent back;
- ``pipeline``: the run itself; it scores each notebook with nbgrader's determine_grade
  (after stripping what the child displayed in test cells) and saves the autograded notebook;
- ``gradebook``: nbgrader's gradebook preprocessors, sharing one open gradebook;
- ``reports``: results.json, feedback.html and grades.csv.
"""
