"""External benchmarks' own prompts: interface strings, used exactly as their papers give them (docs/transfer.md).

SpatialChain (Sousa et al., ../shared/seeds/002): the inference system prompt of Appendix H and the judge prompt of
Appendix F. The paper's extracted text lost some typography that the authors' released scripts show; only that is
restored here, each case listed in docs/transfer.md ("Interface strings"): the line breaks of the numbered list and
straight quotes in the system prompt (the extracted text also carries a stray list number, "evidence 1. from",
absent from the released script's prompt), the braces of the judge's JSON schema and the colon after
``CandidateReasoning``.
"""

from __future__ import annotations

SPATIALCHAIN_SYSTEM_PROMPT = (
    "Your task:\n"
    "1. Analyze the image carefully.\n"
    "2. Provide concise reasoning grounded in visible evidence from the image.\n"
    "3. End your response with 'Answer: <one short sentence>'."
)
"""Appendix H, "System prompt — inference": the system turn of every SpatialChain request."""

SPATIALCHAIN_JUDGE_PROMPT = (
    "You are a strict evaluator for spatial reasoning outputs.\n"
    "\n"
    "Goal\n"
    "Evaluate a candidate answer and its reasoning using:\n"
    "- question\n"
    "- ground truth (when available)\n"
    "- scene graph\n"
    "- candidate final answer\n"
    "- candidate reasoning\n"
    "- image scene graph\n"
    "\n"
    "Scoring Rubric (0.0 to 1.0)\n"
    "1) answer_correctness\n"
    "1.0: final answer is correct and matches the expected target.\n"
    "0.5: partially correct or ambiguous but defensible.\n"
    "0.0: clearly incorrect or unsupported.\n"
    "2) reasoning_faithfulness\n"
    "1.0: reasoning is grounded in spatial evidence (relations, coordinates, object references).\n"
    "0.5: mostly grounded but with weak/missing support in some step.\n"
    "0.0: hallucinated or contradicts available evidence.\n"
    "3) reasoning_completeness\n"
    "1.0: reasoning covers all key steps needed to justify the answer.\n"
    "0.5: key idea present but skips important steps or constraints.\n"
    "0.0: too shallow, irrelevant, or missing.\n"
    "\n"
    "Output Contract\n"
    "Return only valid JSON with this exact schema:\n"
    "{\n"
    '  "answer_correctness": 0.0,\n'
    '  "reasoning_faithfulness": 0.0,\n'
    '  "reasoning_completeness": 0.0\n'
    "}\n"
    "\n"
    "Output Constraints\n"
    "- No markdown fences in the final response.\n"
    "- No extra keys."
)
"""Appendix F, "Spatial Reasoning Judge — System Prompt": the judge's system turn."""

SPATIALCHAIN_JUDGE_FIELDS = (
    "Question: {question}\n"
    "GroundTruth: {ground_truth}\n"
    "SceneGraph: {scene_graph}\n"
    "CandidateAnswer: {candidate_answer}\n"
    "CandidateReasoning: {candidate_reasoning}\n"
    "Return only Json"
)
"""Appendix F's input block: the judge's user turn (filled with ``str.format`` from the item and the output)."""

MENTALBLACKBOARD_PREDICTION_TEMPLATE = (
    "You are an AI system with the ability to mentally visualize and manipulate folded paper. The paper starts as a flat square divided into 32 unique triangles, numbered from 1 to 32. These numbers increase row by row from left to right, starting at the top-left corner. The first image shows the number locations at the paper structure.\n"  # noqa: E501
    "\n"
    "        The remaining images are ordered frames from a 3D animation illustrating a paper folding and hole-punching task. The paper is folded one or more times according to a defined sequence of actions. The paper may also undergo a rotation. Each image frame in the sequence—excluding last action which is hole-punching step—represents either a folding or a rotation action.  \n"  # noqa: E501
    "\n"
    "        The holes are depicted as black shapes or marks. In the given example, the following initial holes are punched:\n"  # noqa: E501
    "\n"
    "        {hole_list}\n"
    "\n"
    "        Your task is mentally unfold the paper step by step. Then, provide:\n"
    "        - the sequence of unfolding steps,\n"
    "        - the total number of resulting holes,\n"
    "        - and the final position, size, direction, and shape of each resulting hole on the original paper.\n"
    "\n"
    "        When determining the unfolding steps, do not reverse the rotation. If there is no rotation,\n"
    "        the unfolding actions should be the exact reverse of the folding actions, both in order and direction.\n"
    "        If there is a rotation, identify the physically accurate unfolding action by accounting for the rotated orientation.\n"  # noqa: E501
    "\n"
    "        Unfolding step choices:\n"
    "        H1-F — Unfold horizontally from top to bottom\n"
    "        H2-F — Unfold horizontally from bottom to top\n"
    "        V1-F — Unfold vertically from left to right\n"
    "        V2-F — Unfold vertically from right to left\n"
    "        D1-F — Unfold diagonally from top-left to bottom-right\n"
    "        D2-F — Unfold diagonally from top-right to bottom-left\n"
    "        D3-F — Unfold diagonally from bottom-left to top-right\n"
    "        D4-F — Unfold diagonally from bottom-right to top-left\n"
    "\n"
    "\n"
    "Think step-by-step, then provide your answer in the required JSON format.\n"
    "\n"
    "```json\n"
    "{{ \n"
    "  \"totalNumberofHoles\": <number>, \n"
    "  \"unfoldingTypes\": [\"H1-F\", \"H2-F\", \"V1-F\", \"V2-F\", \"D1-F\", \"D2-F\", \"D3-F\", \"D4-F\"],\n"
    "  \"resultHoles\": [\n"
    "    {{\n"
    "      \"shape\": \"<circle | ellipse | triangle | star | letter | trapezoid>\",\n"
    "      \"size\": \"<small | large>\",\n"
    "      \"direction\": <0 | 90 | 180 | 270>,\n"
    "      \"location\": <1-32>\n"
    "    }}\n"
    "  ]\n"
    "}}\n"
    "```"
)
"""MentalBlackboard's prediction prompt: the release's ``build_prompt`` of ``run_MentalBlackboard_prediction.py``
(the paper's text omits its Appendix F, the evaluation prompts; this is the one complete evaluation prompt the
release ships), rendered exactly as that function renders it (``textwrap.dedent`` then ``strip``: its response
format starts at column 0, so the dedent removes nothing and the later lines keep their eight spaces), with
``{hole_list}`` left to fill. Line endings are the rendered string's; braces are doubled for ``str.format``."""

MENTALBLACKBOARD_IMAGE_SENTENCES = (
    " The first image shows the number locations at the paper structure.\n"
    "\n"
    "        The remaining images are ordered frames from a 3D animation illustrating a paper folding and hole-punching task. The paper is folded one or more times according to a defined sequence of actions. The paper may also undergo a rotation. Each image frame in the sequence—excluding last action which is hole-punching step—represents either a folding or a rotation action.  "  # noqa: E501
)
"""The template's sentences about its images: a text-only run (no images) replaces them with the folds in words."""
