"""Kernels: the products our encoder and decoders run (oneDNN prepacked, int8, the encoder's attention)."""
