"""Renderer backends behind one interface: a scene spec in, an RGB image (and instance ids) out."""

from data_gen.render.backends import get_renderer, renderer_names
from data_gen.render.base import Renderer, RenderError, RenderResult, SceneSpec

__all__ = ["RenderError", "RenderResult", "Renderer", "SceneSpec", "get_renderer", "renderer_names"]
