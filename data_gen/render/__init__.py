"""Renderer backends behind one interface: a scene spec in, an RGB image (and instance ids) out."""

from data_gen.render.base import Renderer, RenderError, RenderResult, SceneSpec, get_renderer, renderer_names

__all__ = ["RenderError", "RenderResult", "Renderer", "SceneSpec", "get_renderer", "renderer_names"]
