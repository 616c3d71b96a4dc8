"""A library whose name starts with "jax" but that is not JAX (as jaxopt or jaxtyping are); imported by
probe_jax_named_package.ipynb: the compiles its functions trigger are a library's, not the notebook's."""

import jax.numpy as jnp


def shifted_ones(n: int) -> object:
    return jnp.ones(n) + 1.0
