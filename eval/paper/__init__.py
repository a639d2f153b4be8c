"""The official Spatial-IQ analysis's 24 text-side tables, reproduced from ``eval_raw_*`` files.

Definitions follow ``analyses/spatial-IQ_analyses.py`` and ``analyses/hierarchy_dependency.py`` of the
public NVIDIA/Spatial-IQ release (stage ``analysis``, groups ``text`` and ``trained_text``), restated in
metrics terms in docs/eval.md. Modules by table family:

* :mod:`eval.paper.common`: groups, task ids and names, display names, pooled columns, small statistics;
* :mod:`eval.paper.accuracy`: Tables 1/4/5/6/9, Figures 20/21/25/26;
* :mod:`eval.paper.mechanism`: Figures 7/27 (summation 2x2) and 22/28 (composition);
* :mod:`eval.paper.correlations`: Figures 13/14 and the Appendix F bundle couplings;
* :mod:`eval.paper.camera`: Figure 18 and its within-structure paired version;
* :mod:`eval.paper.dependency`: Appendix F lifts, joint integrity and the Object Counting McNemar table;
* :mod:`eval.paper.twoway`: the two-way (scene + responder) fixed-effect algebra behind two of them;
* :mod:`eval.paper.registry`: table names, columns and row keys; :mod:`eval.paper.figures`: the PNGs.
"""
