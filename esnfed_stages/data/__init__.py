"""The data stages: synthesize the embedded data, download the recordings, preprocess them into
windows, import a user's own files, check processed data, and partition users into clients."""
