"""Grappler-style passes: each is `optimize(graph_def, item) -> graph_def` (see tensat_tf.item.GrapplerItem)."""
