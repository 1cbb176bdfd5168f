"""Page 6 · About: the method in a few paragraphs, for teaching."""

from __future__ import annotations

import streamlit as st

from geoviz import app_compute as compute
from geoviz.viz.schematic import method_schematic


def main() -> None:
    compute.ensure_navigation()
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
(Fig. 5), and pretraining on P̂_a built with barycentric maps beat mixup with the same weights
(random pairs of samples) and training on the few-shot data alone on five of six targets
(Table 1). Page 3 lets you explore the whole simplex and compare with mixup on 2-D data;
page 5 exports P̂_a or any P_a.

**Few-shot targets.** With only k labels per class of Q, the other target samples get
pseudo-labels from a k-nearest-neighbour classifier before the maps are computed.
"""
    )
    st.caption(
        "Sizes and costs: features use the squared Euclidean cost without ½; the entropic ε is "
        "relative to the mean cost. Bundled data: small stratified samples of MNIST, Fashion-MNIST, "
        "KMNIST and USPS (see assets/README.md for sources and licences)."
    )


main()
