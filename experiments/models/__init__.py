"""Layer 4, the models: a registered model's pipeline (:func:`~.factory.make_model`), per-listener
strategies, post-processing, and the closed-form ridge."""
