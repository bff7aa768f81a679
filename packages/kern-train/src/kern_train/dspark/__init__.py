"""The DSpark draft: config, model, loss, data, training, evaluation, export."""
