"""Trained models that leave the run: saved, registered in MLflow, predicting, served, streamed."""
