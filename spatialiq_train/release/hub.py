"""The thin ``--push``: upload a release (or a dataset) folder to the Hugging Face Hub.

Cannot be tested against the hub here; what is testable (the token check, the calls made) is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.errors import UserError


def _api() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise UserError("--push needs huggingface_hub (pip install huggingface_hub)") from exc
    if not huggingface_hub.get_token():
        raise UserError("--push: no Hugging Face token is configured; run `hf auth login` or set HF_TOKEN, "
                        "then rerun (nothing was built or uploaded)")
    return huggingface_hub.HfApi()


def check_push(repo: str, api: Any = None) -> Any:
    """The push prerequisites (an OWNER/NAME repo, huggingface_hub and a token), checked before anything is built;
    returns the API client."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise UserError(f"--push {repo!r}: expected OWNER/NAME, e.g. my-org/spatialiq-dapo-7b")
    return api or _api()


def push_folder(folder: Path, repo: str, *, repo_type: Literal["model", "dataset"] = "model", private: bool = True,
                revision_tag: str | None = None, api: Any = None) -> str:
    """Create ``repo`` (private by default), upload ``folder``, tag the commit; returns the repo URL."""
    api = check_push(repo, api)
    url = api.create_repo(repo_id=repo, repo_type=repo_type, private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type=repo_type,
                      commit_message=f"spatialiq release {revision_tag or ''}".strip())
    if revision_tag:
        api.create_tag(repo_id=repo, tag=revision_tag, repo_type=repo_type, exist_ok=True)
    return str(url)
