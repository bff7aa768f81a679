"""kern-gen: manifest generators from mined captures (in progress) and kern's own kernels."""
