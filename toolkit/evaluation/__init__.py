"""Evaluation: what a learned representation is worth.

``metrics``  geometry of an embedding (alignment, uniformity, tolerance, distance histograms, ...)
``probes``   the linear probe on frozen features (scikit-learn's logistic regression)
``knn``      the kNN classifier on frozen features, top-k counts
``streamed`` both for features that come in chunks (a streamed dataset), the SGD probe
``plots``    the figures a run logs (loss curves, histograms, time to accuracy)
"""
