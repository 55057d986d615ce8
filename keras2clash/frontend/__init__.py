"""Frontend: a Keras model (file or object) in, the typed graph IR out.

`load.load_keras_model` reads a model file; `walk` lists its layer calls; `convert` turns
each into an IR record and runs the passes (`ir.passes`). `convert.to_graph` is the entry point. The package
imports nothing itself: the kinds (`keras2clash.kinds`) register their converters with
`frontend.registry` below the stages that read graphs.
"""
