"""Studies: many runs planned, launched, compared and judged together.

``sweeps``      grids of recipe overrides, idempotent points, summary tables
``launch``      running the points (in process or on Ray), resuming, failure isolation
``tune``        hyper-parameter search with Ray Tune
``comparison``  ``ctk compare``: per-group means, intervals, paired tests, figures
``reproduce``   ``ctk reproduce``: the papers' tables beside what was measured
``claims``      the claims a paper draws from a table (orderings), tested on the measured runs
``needs``       what a paper table needs before it runs here: datasets, a GPU, the time measured
``study``       ``ctk study``: one idea against its baseline in every domain, one table
``study_file`` a study file: its schema, the study validated with every recipe, its points
``study_report`` a study's answer: the measured points, the table, the forest figure
``listing``     ``ctk runs``: status, heartbeat, checkpoint and resume command per run
``runsets``     what a set of stored runs holds: seeds, sweep parents, result metrics, varying settings
``differs``     what else differs within and between compared groups (steps, precision, CPU, commit)
``budget_steps`` one step count for every point of a ``budget.minutes`` sweep, study or tune
``stats``       bootstrap intervals and tests
``tables``      table / markdown / csv / json rendering
``ui_view``     the mlflow UI's saved columns and notes
"""
