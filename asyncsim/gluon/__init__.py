"""Gluon, as the chapters call it: `from asyncsim import autograd, gluon, init` and
`from asyncsim.gluon import nn`. Blocks and layers (`nn`), deferred-initialised parameters,
losses (`loss`), the SGD `Trainer`, `utils.split_and_load`; `hybridize()` traces a HybridBlock
into one op (`asyncsim.nd.jit`). Everything is built on the shared `nd` surface, so a network
runs on whatever `nd` its input comes from: recorded for the model, or on the real engine.
"""

from asyncsim.gluon import init, loss, nn, utils
from asyncsim.gluon.block import Block, HybridBlock
from asyncsim.gluon.parameter import DeferredInitializationError, Parameter, ParameterDict
from asyncsim.gluon.trainer import Trainer

__all__ = ["Block", "DeferredInitializationError", "HybridBlock", "Parameter", "ParameterDict",
           "Trainer", "init", "loss", "nn", "utils"]
