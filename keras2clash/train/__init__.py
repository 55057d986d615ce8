"""Training: the golden trainer (SGD on a Dense chain in integers) and its Keras float twin."""
