"""Config honesty: every KubeletConfiguration field has a support decision, unsupported ones warn."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent import configsupport
from pykubelet.agent.config import KubeletConfiguration, parse_kubelet_config

DOC = Path(__file__).resolve().parents[3] / "docs" / "kubelet-configuration.md"


def test_every_configuration_field_is_in_the_support_table() -> None:
    assert sorted(configsupport.TABLE) == sorted(configsupport.json_fields())


def test_defaults_warn_about_nothing() -> None:
    assert configsupport.warnings(KubeletConfiguration()) == []


def test_an_unsupported_field_set_to_a_non_default_value_warns_naming_it() -> None:
    cfg = parse_kubelet_config({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                "memoryManagerPolicy": "Static", "registryPullQPS": 1, "maxPods": 20,
                                "configMapAndSecretChangeDetectionStrategy": "Get"})
    warnings = configsupport.warnings(cfg)
    assert "memoryManagerPolicy is set but not supported; ignored (no memory manager: only None)" in warnings
    assert any(w.startswith("registryPullQPS is set but not supported; ignored") for w in warnings)
    assert any(w.startswith("configMapAndSecretChangeDetectionStrategy is set but only partly supported")
               for w in warnings)
    assert not any("maxPods" in w for w in warnings)


def test_the_docs_table_is_generated_from_the_support_table() -> None:
    assert DOC.read_text() == configsupport.markdown()


async def test_an_image_service_endpoint_of_its_own_gets_its_own_channel() -> None:
    from pykubelet.agent.images.endpoint import SplitCRIClient, runtime_client

    same = runtime_client("unix:///run/a.sock", "/run/a.sock", timeout=1, observer=None)
    assert not isinstance(same, SplitCRIClient)
    split = runtime_client("unix:///run/a.sock", "unix:///run/b.sock", timeout=1, observer=None)
    assert isinstance(split, SplitCRIClient)
    assert split.img is not None and split.rt is not None
    assert split._h2_images is not None and split._h2_images is not split._h2
    assert split._h2_images.path == "/run/b.sock" and same._h2_images is None
    await split.close()
    await same.close()


def test_an_unsupported_sub_field_of_a_supported_field_warns_naming_its_path() -> None:
    cfg = parse_kubelet_config({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                "authentication": {"anonymous": {"enabled": True}, "webhook": {"cacheTTL": "10s"}}})
    assert configsupport.warnings(cfg) == [
        "authentication.webhook.cacheTTL is set but not supported; ignored "
        "(token reviews are cached for upstream's default 2m)"]
