"""Evaluation: what a learned representation is worth.

``metrics``  geometry of an embedding (alignment, uniformity, tolerance, distance histograms, ...)
``probes``   linear probe and kNN on frozen features (scikit-learn)
``plots``    the figures a run logs (loss curves, histograms, time to accuracy)
"""
