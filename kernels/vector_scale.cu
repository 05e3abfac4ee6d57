// vector_scale
