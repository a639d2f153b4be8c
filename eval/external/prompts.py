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
