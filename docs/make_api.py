"""Regenerate docs/api.md from the package's docstrings: python docs/make_api.py"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

SECTIONS = [
    ("Objectives", "dgn.objectives", ["SCMM", "FacilityLocation", "Objective", "concave", "make_objective"]),
    ("Greedy", "dgn.greedy", ["greedy_select", "soft_greedy_select", "Selection", "SoftSelection"]),
    ("Greedy layer", "dgn.layer", ["GreedyLayer"]),
    ("Encoders", "dgn.encoder", ["Encoder", "DeepEncoder"]),
    ("Model", "dgn.model", ["DGNConfig", "DGN", "DGNOutput", "load_model"]),
    ("Checkpoints", "dgn.checkpoint", ["checkpoint_kind", "is_end_to_end_model", "read_checkpoint",
                                       "write_checkpoint", "load_weights"]),
    ("Losses", "dgn.losses", ["layerwise_cross_entropy", "soft_label_cross_entropy", "soft_cross_entropy",
                              "approx_ndcg_loss", "layerwise_approx_ndcg_loss", "mix_sparse_dense",
                              "LayerwiseCrossEntropy", "SoftLabelCrossEntropy", "SoftCrossEntropy",
                              "ApproxNDCGLoss", "LayerwiseApproxNDCG"]),
    ("Metrics", "dgn.metrics", ["recall_at_k", "precision_at_k", "strict_at_k", "f1_from_precision_recall",
                                "ndcg_at_k", "mrr", "average_precision", "parse_metric", "SelectionMetrics",
                                "evaluate_rankings", "fever_score", "format_table", "evaluate_files"]),
    ("Data", "dgn.data", ["Problem", "Prediction", "read_problems", "write_problems", "read_predictions",
                          "write_predictions", "convert", "ADAPTERS", "DATASETS", "locate", "download",
                          "WikiStore", "atomic_write", "concat_problem_files", "join_problem_files"]),
    ("", "dgn.data.registry", ["recorded_sha256", "fever_store_path"]),
    ("Features", "dgn.features", ["tokenize", "WordVectors", "embed_texts", "train_fasttext_vectors",
                                  "claim_sentence_features", "cosine_scores", "TfidfScorer", "FeatureCache",
                                  "CachedFeatures", "lexical_features", "bm25_scores", "LEXICAL_FEATURES"]),
    ("", "dgn.features.family", ["FEATURE_BLOCKS", "default_feature_names", "parse_feature_names",
                                  "WordvecBlock", "LexicalBlock", "SentenceBlock"]),
    ("Sentence encoders (the `encoders` extra)", "dgn.sentence",
     ["load_sentence_model", "resolve_model_path", "encode_texts", "pair_features", "EndToEndModel", "EndToEndTask",
      "FinetuneConfig", "FinetuneResult", "finetune", "rank_problems", "ranked_problems", "cut_candidates",
      "train_end_to_end"]),
    ("Pipeline and training", "dgn.pipeline", ["Featurizer", "SelectionDataset", "Batch", "pad_features",
                                               "featurizer_for_model"]),
    ("", "dgn.training", ["fit", "Task", "TrainResult", "clip_gradients", "check_resumable", "load_training_state",
                          "write_training_state", "write_history"]),
    ("", "dgn.train", ["TrainConfig", "FrozenFeatureTask", "train_model", "training_loss", "make_optimizer",
                       "train_from_files", "read_run_settings"]),
    ("", "dgn.ranking", ["rank", "ranked", "rank_batch", "evaluate_model"]),
    ("", "dgn.distributed", ["process_group", "resolve_device", "local_slice", "average_gradients",
                             "all_reduce_sum", "all_gather_objects", "rank", "world_size", "is_main", "barrier"]),
    ("", "dgn.trainer", ["train", "TrainRequest"]),
    ("", "dgn.tune", ["finetune_checkpoint", "finetune_end_to_end"]),
    ("Explanations", "dgn.explain", ["load_explainable", "explain_problem", "Explanation", "format_explanation",
                                     "plot_explanation"]),
    ("Prediction", "dgn.predict", ["predict_file", "predict_dataset", "COMPILE_MIN_PROBLEMS"]),
    ("Selecting from raw text", "dgn.selector", ["load", "Selector", "Selector.from_pretrained", "Selector.select",
                                                 "Selector.select_batch", "TextSelection", "EndToEndModelSelector",
                                                 "FrozenFeatureSelector"]),
    ("Baselines", "dgn.baselines", ["EncoderScorer", "tfidf_rankings", "TFIDF_CONFIGS", "tfidf_rankings_config",
                                    "select_tfidf_config", "bm25_rankings", "cosine_rankings", "scmm_rankings",
                                    "top_k"]),
    ("Benchmark", "dgn.benchmark", ["run_benchmark", "BenchmarkSettings", "format_results", "prepare_data",
                                    "prepare_folds", "redundancy", "fever_wiki", "read_fever_claims", "fever_evidence_scores",
                                    "format_fever"]),
    ("Rank fusion", "dgn.fusion", ["fuse", "FUSION_METHODS", "NORMS"]),
    ("", "dgn.fusion.graphs", ["FusionGraph", "fusion_graph", "graph_similarity", "FusionGraphRetriever",
                               "ranked_lists", "position_weights"]),
    ("", "dgn.fusion.vectors", ["embed", "FusionVectors"]),
    ("", "dgn.fusion.protocol", ["knn_run", "evaluate_self_retrieval", "fusion_graph_fuse", "fusion_vector_fuse"]),
    ("", "dgn.fusion.candidates", ["CandidateStage", "CANDIDATE_RANKERS", "CANDIDATE_FUSIONS", "stage_from_options"]),
    ("Errors", "dgn.errors", ["DgnUserError", "DataError"]),
]


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def main() -> None:
    out = ["# API reference", "",
           "Generated from the docstrings by `python docs/make_api.py`. Shapes use one legend:",
           "B batch, N candidates, F input features, E encoded features, K greedy steps.", ""]
    for title, module_name, names in SECTIONS:
        module = importlib.import_module(module_name)
        if title:
            out += [f"## {title}", ""]
        for name in names:
            obj: object = module
            for part in name.split("."):  # "Class.method" documents a method
                obj = getattr(obj, part)
            if inspect.isclass(obj) or inspect.isroutine(obj):
                kind = "class" if inspect.isclass(obj) else "def"
                out += [f"### `{module_name}.{name}`", "", "```python",
                        f"{kind} {name.rsplit('.', 1)[-1]}{_signature(obj)}", "```", ""]
                doc = inspect.getdoc(obj) or ""
                out += [doc, ""]
            else:
                out += [f"### `{module_name}.{name}`", "", f"A `{type(obj).__name__}`: "
                        + (", ".join(f"`{k}`" for k in obj) if isinstance(obj, dict) else repr(obj)), ""]
    Path(__file__).with_name("api.md").write_text("\n".join(out), encoding="utf-8")


if __name__ == "__main__":
    main()
