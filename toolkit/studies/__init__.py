"""Studies: many runs planned, launched, compared and judged together.

``sweeps``      grids of recipe overrides, idempotent points, summary tables
``launch``      running the points (in process or on Ray), resuming, failure isolation
``tune``        hyper-parameter search with Ray Tune
``comparison``  ``ctk compare``: per-group means, intervals, paired tests, figures
``reproduce``   ``ctk reproduce``: the papers' tables beside what was measured
``listing``     ``ctk runs``: status, heartbeat, checkpoint and resume command per run
``stats``       bootstrap intervals and tests
``tables``      table / markdown / csv / json rendering
``ui_view``     the mlflow UI's saved columns and notes
"""
