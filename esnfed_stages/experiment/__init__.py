"""The experiment stages: model selection, retraining, assessment and prediction, with what they
share: the trial runner and its backends (sequential, loky, Ray), trial data, saved models, and
the keys that decide whether saved work is reusable."""
