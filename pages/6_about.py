"""Page 6 · About: the method in a few paragraphs, for teaching."""

from __future__ import annotations

import streamlit as st

from geoviz.app import widgets
from geoviz.app.services.stored_evidence import measured_claim, stored_studies
from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS
from geoviz.viz.schematic import method_schematic
from geoviz.vocabulary import DEFAULT_EPSILON


def sharp_or_blurry() -> None:
    """The entropic ε and the two numbers that say how sharp a map is."""
    st.markdown(
        """
**Sharp or blurry maps: ε.** The coupling π* is *entropic*: it minimises ⟨π, C⟩ − ε_abs H(π),
and ε sets how many reference samples each T_i(x) averages. geoviz's ε is **relative to the
mean ground cost** over all pairs of Q and P_i, with the cost ‖x − x′‖² + W₂²(α_y, α_y′)
(squared Euclidean, no ½):
"""
    )
    st.latex(
        r"\varepsilon_{abs} = \varepsilon \cdot \operatorname{mean}_{i,j} C_{ij}, \qquad "
        r"T(x_i) = \sum_j w_{ij}\, x'_j,\quad w_{ij} = \pi_{ij} / \textstyle\sum_k \pi_{ik}."
    )
    st.markdown(
        f"""
The default ε = {DEFAULT_EPSILON:g} gives **sharp** maps. Every map reports two numbers (page 2,
the CLI, export manifests):

* **effective neighbours** — the median over x of exp(entropy of wᵢ.), how many reference
  samples T(x) averages. **1** = a one-to-one map (T(x) is a real reference sample);
  **N_P** = every x goes to the mean image of P_i. Above {BLUR_NEIGHBOURS:g} a map is
  flagged as blurry.
* **label confidence** — the mean largest entry of T(x)'s soft label. **1** = every mapped
  point gets one class of P_i; 1/C = uniform soft labels.

On the bundled MNIST → Fashion-MNIST samples (2000 each) ε = 0.05 averages about 1100 of the
2000 garments per digit (label confidence 0.28), ε = 0.01 about 107 (0.58) and ε = 0.001 about
2.4 (0.87). Smaller ε needs more Sinkhorn iterations; larger ε pulls every mapped point
towards the mean of P_i, so the mapped images blur and their labels mix classes. Page 2 has
the ε slider and shows, for a few target samples, the reference samples with
the largest weights w that make up T(x).
"""
    )


def measured_section() -> None:
    """The paper's Table 1 claim beside this project's own measurement (read at runtime)."""
    table = stored_studies().table1
    if table is None:
        st.caption(
            "This installation ships no measured Table 1 (assets/evidence/table1_box.json): "
            "the claim above is the paper's, not checked here."
        )
        return
    st.markdown(
        "**The paper's claim, and what this project measured.** The paper: pretraining on "
        "P̂_a beats Mixup and the few-shot baseline on five of six targets. Here: "
        f"{measured_claim(table)} Both use the same â; they "
        "differ in the samples (Mixup mixes real reference images, the OTDD set pushes Q's "
        "pseudo-labelled samples through the maps). Page 7 (Evidence) shows the table beside "
        "the paper's numbers, with its command."
    )


def main() -> None:
    st.title("6 · About the method")
    st.markdown(
        """
geoviz implements **Fan & Alvarez-Melis, *Generating Synthetic Datasets by Interpolating
along Generalized Geodesics* (UAI 2023)**. Pretraining data often comes as several
datasets P₁, …, P_m. When the target task Q is known, the best pretraining set may not be
any single P_i but a *combination* of them. The paper defines such combinations with
optimal transport (OT) and picks the one closest to Q.
"""
    )
    st.plotly_chart(method_schematic(), key="about_schematic")
    st.markdown(
        """
**1 · Distances between labelled datasets.** The OT dataset distance (OTDD) compares two
datasets through their samples *and* labels: moving a sample costs its feature distance
plus the Wasserstein distance between the class-conditional distributions of its old and
new label,
"""
    )
    st.latex(
        r"d^2_{OT}(P, Q) = \min_{\pi\in\Pi(P,Q)} \int \|x - x'\|^2 + W_2^2(\alpha_y, \alpha_{y'})\, d\pi(z, z')."
    )
    st.markdown(
        """
**2 · Maps from Q to every reference.** An entropic OTDD coupling π* between Q and P_i gives
the *barycentric map* T_i(x, y) = [N_Q π* X_P, N_Q π* Y_P]: every target sample is sent to a
weighted average of reference samples and gets a **soft label** over P_i's classes
(page 2 shows these maps). Label sets may differ completely (digits vs clothes).

"""
    )
    sharp_or_blurry()
    st.markdown(
        """
**3 · Combining datasets.** For weights a on the simplex Δ, the dataset
"""
    )
    st.latex(r"P_a = \Big(\sum_{i=1}^m a_i\, T_i\Big)_\sharp Q")
    st.markdown(
        """
moves each target sample to the weighted average of its images; labels are padded with
zeros into one space [P₁ classes | … | P_m classes] and averaged the same way. This is a
*generalized geodesic* with base Q: unlike the Wasserstein barycenter, the distance to Q is
convex along it. For two datasets, McCann's interpolation ((1 − t) Id + t T)#Q is its
one-dimensional analogue (page 4).

**4 · Projection.** With the (2,Q) dataset distance W²₂,Q(P_i, P_j) — how far apart the maps
send the *same* target samples — the paper approximates the distance of P_a to Q by
"""
    )
    st.latex(
        r"\mathcal{W}^2(P_a, Q) = \sum_i a_i\, \mathcal{W}^2_{2,Q}(P_i, Q)"
        r" - \tfrac12 \sum_{i\neq j} a_i a_j\, \mathcal{W}^2_{2,Q}(P_i, P_j),"
    )
    st.markdown(
        """
a quadratic function of a. Its minimiser â (a small quadratic program) defines the projection
P̂_a: the synthetic pretraining set closest to the target. In the paper's *NIST experiments a
lower W²(P_a, Q) goes with higher accuracy after fine-tuning on a few labelled target samples
(Fig. 5), and the paper reports that pretraining on P̂_a built with barycentric maps beat
mixup with the same weights (random pairs of samples) and training on the few-shot data alone
on five of six targets (Table 1). Page 3 lets you explore the whole simplex and compare with
mixup on 2-D data; page 5 exports P̂_a or any P_a.
"""
    )
    measured_section()
    st.markdown(
        """
**Few-shot targets.** With only k labels per class of Q, the other target samples get
pseudo-labels by label spreading on Q's nearest-neighbour graph (the labelled points kept)
before the maps are computed.
"""
    )
    st.caption(
        "Sizes and costs: features use the squared Euclidean cost without ½; the entropic ε is "
        f"relative to the mean cost (default {DEFAULT_EPSILON:g}). Bundled data: small stratified samples of MNIST, Fashion-MNIST, "
        "KMNIST and USPS (see assets/README.md for sources and licences)."
    )


with widgets.app_page("6 · About the method"):
    main()
