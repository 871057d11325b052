"""Training hyperbolic embeddings (Poincare ball) of relations such as hierarchies."""

from hypann.embed.poincare_train import MAX_NORM, PoincareTraining, train_poincare

__all__ = ["train_poincare", "PoincareTraining", "MAX_NORM"]
