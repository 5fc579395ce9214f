"""Program names: the vocabularies of the xla and nlp layout programs, the model kind (and training
or not) a name implies, and the (family, search) of a layout collection id.
"""

from __future__ import annotations

_XLA_VISION = (
    "alexnet", "resnet50", "resnet101", "resnet_v1_50", "resnet_v2_152", "inception_v2", "inception_v3",
    "inception_v4", "mobilenet_v1", "mobilenet_v2", "efficientnet_b0", "efficientnet_b4", "densenet121",
    "vgg16", "vgg19", "mnasnet_a1", "retinanet", "mask_rcnn", "shapemask", "unet_3d", "unet2d",
    "xception", "squeezenet", "nasnet_large", "deeplab_v3", "ssd_mobilenet", "yolo_v3", "amoebanet_d",
)  # fmt: skip
_XLA_SEQ = (
    "bert_pretraining",
    "transformer_tf2",
    "mlperf_bert",
    "mlperf_transformer",
    "gpt2",
    "t5_small",
)
_XLA_DENSE = (
    "ncf",
    "dlrm",
    "magenta_dynamic",
    "brax_es",
    "lstm_lm",
    "wavenet",
    "tacotron",
    "dcgan",
)
_NLP_MODELS = (
    *(f"small_bert_bert_en_uncased_L-{layers}_H-{h}_A-{h // 64}"
      for layers in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)),
    "bert_en_cased_L-12_H-768_A-12", "bert_en_uncased_L-12_H-768_A-12", "bert_en_uncased_L-24_H-1024_A-16",
    "bert_multi_cased_L-12_H-768_A-12", "albert_en_base", "albert_en_large", "albert_en_xlarge",
    "electra_small", "electra_base", "electra_large", "talking-heads_base", "talking-heads_large",
    "mobilebert_en_uncased_L-24_H-128_B-512_A-4_F-4_OPT", "experts_bert_pubmed", "experts_bert_wiki_books",
    "lambert_en_uncased_L-24_H-1024_A-16", "universal-sentence-encoder-cmlm_en-base",
)  # fmt: skip


def program_vocabulary(family: str) -> list[str]:
    """Every program name of a family, in a fixed order (unique names)."""
    names: list[str] = []
    if family == "nlp":
        for model in _NLP_MODELS:
            for batch in (8, 16, 32, 64, 128):
                for phase in ("train", "test"):
                    names.append(f"{model}_batch_size_{batch}_{phase}")
        return names
    for model in (*_XLA_VISION, *_XLA_SEQ, *_XLA_DENSE):
        for batch in (1, 8, 16, 32, 64, 128, 256):
            names.append(f"{model}_train_batch_{batch}")
        for batch in (1, 8, 32):
            names.append(f"{model}_inference_batch_{batch}")
            names.append(f"{model}_batch_{batch}_eval")
        for topology in ("2x2", "4x4", "8x8"):
            for precision in ("fp16", "bf16", "fp32"):
                names.append(f"{model}.{topology}.{precision}")
    return names


def program_kind(family: str, name: str) -> tuple[str, bool]:
    """(model kind, training graph?) of a program name: kind is 'vision', 'transformer' or 'dense'."""
    train = not any(tag in name for tag in ("_inference", "_eval", "_test"))
    if family == "nlp":
        return "transformer", train
    model = name.split("_train")[0].split("_inference")[0].split("_batch")[0].split(".")[0]
    if model in _XLA_SEQ:
        return "transformer", train
    if model in _XLA_DENSE:
        return "dense", train
    return "vision", train


def layout_family(collection: str) -> tuple[str, str]:
    """'layout:xla:random' -> ('xla', 'random')."""
    _, family, search = collection.split(":")
    return family, search
