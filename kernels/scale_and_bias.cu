// scale_and_bias
