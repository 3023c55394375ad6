"""Decoding the Kubernetes protobuf request bodies kubectl sends, into Kubernetes JSON.

kubectl's typed clients send some bodies as ``application/vnd.kubernetes.protobuf`` and never
retry as JSON when the server answers 415: ``kubectl create secret|configmap|namespace|
serviceaccount|token``, ``kubectl certificate approve|deny`` (a whole CertificateSigningRequest
PUT to ``/approval``), ``kubectl drain`` without eviction (DeleteOptions), ``kubectl create
deployment|job|cronjob|role...`` and ``kubectl create job --from=cronjob/x``, which copies a whole
user-written pod template (hence the complete core/v1 PodSpec subtree below).  The body is the
``k8s\\0`` magic followed by a ``runtime.Unknown`` envelope (1 typeMeta{1 apiVersion, 2 kind},
2 raw, 3 contentEncoding, 4 contentType); ``raw`` is the object's own message, which carries no
TypeMeta.

Why a schema table rather than upstream's generated.proto files or a hand-written wire parser:
vendoring the .proto files would pull in every API group (core/v1 alone is ~7000 lines) and a
protoc step; a hand-written parser has to re-implement maps, repeated fields and nesting per
message.  Instead ``SCHEMA`` lists, for just the messages we accept, the field numbers from
upstream's ``generated.proto`` (k8s.io/api and k8s.io/apimachinery); at import we build one
``FileDescriptorProto`` from it, get message classes from the protobuf runtime, parse with them
and convert with ``json_format.MessageToDict``.  Field names in the k8s protos are already the
JSON names, and ``bytes`` become standard base64, which is exactly Kubernetes JSON for
Secret.data, ConfigMap.binaryData and CSR request/certificate.  ``_fix`` then does what
MessageToDict cannot know: int64 arrives as a string, ``Time{seconds,nanos}`` becomes RFC 3339,
``FieldsV1{Raw}`` is embedded JSON, ``ExtraValue{items}`` is a bare list, ``Quantity{string}`` is
its string, ``IntOrString{type,intVal,strVal}`` a JSON number or string, the fields of a Go embedded
struct (``Volume.volumeSource``, ``Probe.handler``, ``EphemeralContainer.ephemeralContainerCommon``,
``ConfigMapKeySelector.localObjectReference``...: separate protobuf fields, ``json:",inline"`` in
Go) move up into their parent, and zero values are dropped.  The last one matters because Go's generated marshallers write every non-pointer field
even when empty (``name: ""``, ``generation: 0``, an empty ``creationTimestamp``) while
Kubernetes JSON omits them; pointer fields (marked ``?`` in the table: ``immutable``,
``gracePeriodSeconds``...) keep an explicit zero/false because there it means something.

Adding a kind is one table entry plus a ``KINDS`` line.  Unknown kinds, and fields a listed message
does not list (the protobuf runtime would keep them aside and the conversion drop them), raise
``UnsupportedKind`` (the server answers 415): an object is stored whole or not at all. Malformed
bytes raise ``ValueError`` (400).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    empty_pb2,
    json_format,
    message_factory,
    unknown_fields,
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

MAGIC = b"k8s\x00"

# message -> "jsonName=number:type" fields.  type: a scalar (string, bytes, bool, int32, int64),
# another message of this table, "[]T" for repeated, "map<K,V>" for maps; a trailing "?" marks a Go
# pointer field, whose zero value is kept (for a message: an empty ``emptyDir: {}`` stays); a leading
# "+" marks a Go embedded struct (``json:",inline"``), whose fields JSON puts in the parent.  Numbers
# are upstream's generated.proto.

# core/v1 Container; EphemeralContainerCommon is upstream's field-for-field copy of it
_CONTAINER = ("name=1:string image=2:string command=3:[]string args=4:[]string workingDir=5:string "
              "ports=6:[]ContainerPort envFrom=19:[]EnvFromSource env=7:[]EnvVar resources=8:ResourceRequirements "
              "resizePolicy=23:[]ContainerResizePolicy restartPolicy=24:string? "
              "restartPolicyRules=25:[]ContainerRestartRule volumeMounts=9:[]VolumeMount "
              "volumeDevices=21:[]VolumeDevice livenessProbe=10:Probe readinessProbe=11:Probe startupProbe=22:Probe "
              "lifecycle=12:Lifecycle terminationMessagePath=13:string terminationMessagePolicy=20:string "
              "imagePullPolicy=14:string securityContext=15:SecurityContext stdin=16:bool stdinOnce=17:bool "
              "tty=18:bool")

SCHEMA: dict[str, str] = {
    # k8s.io/apimachinery/pkg/runtime
    "TypeMeta": "apiVersion=1:string kind=2:string",
    "Unknown": "typeMeta=1:TypeMeta raw=2:bytes contentEncoding=3:string contentType=4:string",
    # k8s.io/apimachinery/pkg/apis/meta/v1
    "Time": "seconds=1:int64 nanos=2:int32",
    "FieldsV1": "Raw=1:bytes",
    "OwnerReference": "apiVersion=5:string kind=1:string name=3:string uid=4:string controller=6:bool? "
                      "blockOwnerDeletion=7:bool?",
    "ManagedFieldsEntry": "manager=1:string operation=2:string apiVersion=3:string time=4:Time "
                          "fieldsType=6:string fieldsV1=7:FieldsV1 subresource=8:string",
    "ObjectMeta": "name=1:string generateName=2:string namespace=3:string selfLink=4:string uid=5:string "
                  "resourceVersion=6:string generation=7:int64 creationTimestamp=8:Time deletionTimestamp=9:Time "
                  "deletionGracePeriodSeconds=10:int64? labels=11:map<string,string> "
                  "annotations=12:map<string,string> ownerReferences=13:[]OwnerReference finalizers=14:[]string "
                  "managedFields=17:[]ManagedFieldsEntry",
    "Preconditions": "uid=1:string? resourceVersion=2:string?",
    "DeleteOptions": "gracePeriodSeconds=1:int64? preconditions=2:Preconditions orphanDependents=3:bool? "
                     "propagationPolicy=4:string? dryRun=5:[]string "
                     "ignoreStoreReadErrorWithClusterBreakingPotential=6:bool?",
    # k8s.io/api/core/v1
    "ObjectReference": "kind=1:string namespace=2:string name=3:string uid=4:string apiVersion=5:string "
                       "resourceVersion=6:string fieldPath=7:string",
    "LocalObjectReference": "name=1:string",
    "Secret": "metadata=1:ObjectMeta data=2:map<string,bytes> stringData=4:map<string,string> type=3:string "
              "immutable=5:bool?",
    "ConfigMap": "metadata=1:ObjectMeta data=2:map<string,string> binaryData=3:map<string,bytes> immutable=4:bool?",
    "NamespaceSpec": "finalizers=1:[]string",
    "NamespaceCondition": "type=1:string status=2:string lastTransitionTime=4:Time reason=5:string message=6:string",
    "NamespaceStatus": "phase=1:string conditions=2:[]NamespaceCondition",
    "Namespace": "metadata=1:ObjectMeta spec=2:NamespaceSpec status=3:NamespaceStatus",
    "ServiceAccount": "metadata=1:ObjectMeta secrets=2:[]ObjectReference imagePullSecrets=3:[]LocalObjectReference "
                      "automountServiceAccountToken=4:bool?",
    # k8s.io/api/authentication/v1
    "BoundObjectReference": "kind=1:string apiVersion=2:string name=3:string uid=4:string",
    "TokenRequestSpec": "audiences=1:[]string expirationSeconds=4:int64? boundObjectRef=3:BoundObjectReference",
    "TokenRequestStatus": "token=1:string expirationTimestamp=2:Time",
    "TokenRequest": "metadata=1:ObjectMeta spec=2:TokenRequestSpec status=3:TokenRequestStatus",
    "TokenReviewSpec": "token=1:string audiences=2:[]string",
    "TokenReview": "metadata=1:ObjectMeta spec=2:TokenReviewSpec",
    # k8s.io/api/certificates/v1
    "ExtraValue": "items=1:[]string",
    "CertificateSigningRequestSpec": "request=1:bytes signerName=7:string expirationSeconds=8:int32? "
                                     "usages=5:[]string username=2:string uid=3:string groups=4:[]string "
                                     "extra=6:map<string,ExtraValue>",
    "CertificateSigningRequestCondition": "type=1:string status=6:string reason=2:string message=3:string "
                                          "lastUpdateTime=4:Time lastTransitionTime=5:Time",
    "CertificateSigningRequestStatus": "conditions=1:[]CertificateSigningRequestCondition certificate=2:bytes",
    "CertificateSigningRequest": "metadata=1:ObjectMeta spec=2:CertificateSigningRequestSpec "
                                 "status=3:CertificateSigningRequestStatus",
    # k8s.io/api/policy/v1
    "Eviction": "metadata=1:ObjectMeta deleteOptions=2:DeleteOptions",
    # k8s.io/api/rbac/v1 (kubectl create role|clusterrole|rolebinding|clusterrolebinding)
    "LabelSelectorRequirement": "key=1:string operator=2:string values=3:[]string",
    "LabelSelector": "matchLabels=1:map<string,string> matchExpressions=2:[]LabelSelectorRequirement",
    "PolicyRule": "verbs=1:[]string apiGroups=2:[]string resources=3:[]string resourceNames=4:[]string "
                  "nonResourceURLs=5:[]string",
    "AggregationRule": "clusterRoleSelectors=1:[]LabelSelector",
    "Role": "metadata=1:ObjectMeta rules=2:[]PolicyRule",
    "ClusterRole": "metadata=1:ObjectMeta rules=2:[]PolicyRule aggregationRule=3:AggregationRule",
    "Subject": "kind=1:string apiGroup=2:string name=3:string namespace=4:string",
    "RoleRef": "apiGroup=1:string kind=2:string name=3:string",
    "RoleBinding": "metadata=1:ObjectMeta subjects=2:[]Subject roleRef=3:RoleRef",
    "ClusterRoleBinding": "metadata=1:ObjectMeta subjects=2:[]Subject roleRef=3:RoleRef",
    # k8s.io/api/authorization/v1 (kubectl auth can-i)
    "ResourceAttributes": "namespace=1:string verb=2:string group=3:string version=4:string resource=5:string "
                          "subresource=6:string name=7:string",
    "NonResourceAttributes": "path=1:string verb=2:string",
    "SelfSubjectAccessReviewSpec": "resourceAttributes=1:ResourceAttributes nonResourceAttributes=2:NonResourceAttributes",
    "SubjectAccessReviewStatus": "allowed=1:bool reason=2:string evaluationError=3:string denied=4:bool",
    "SelfSubjectAccessReview": "metadata=1:ObjectMeta spec=2:SelfSubjectAccessReviewSpec "
                               "status=3:SubjectAccessReviewStatus",
    "SubjectAccessReviewSpec": "resourceAttributes=1:ResourceAttributes nonResourceAttributes=2:NonResourceAttributes "
                               "user=3:string groups=4:[]string extra=5:map<string,ExtraValue> uid=6:string",
    "SubjectAccessReview": "metadata=1:ObjectMeta spec=2:SubjectAccessReviewSpec status=3:SubjectAccessReviewStatus",
    # k8s.io/apimachinery/pkg/api/resource and pkg/util/intstr (special JSON forms, see _value)
    "Quantity": "string=1:string",
    "IntOrString": "type=1:int64 intVal=2:int32 strVal=3:string",
    # k8s.io/api/core/v1 PodSpec and everything below it (kubectl create deployment|job|cronjob,
    # create job --from=cronjob/x sends a whole user-written template)
    "PodSpec": "volumes=1:[]Volume initContainers=20:[]Container containers=2:[]Container "
               "ephemeralContainers=34:[]EphemeralContainer restartPolicy=3:string "
               "terminationGracePeriodSeconds=4:int64? activeDeadlineSeconds=5:int64? dnsPolicy=6:string "
               "nodeSelector=7:map<string,string> serviceAccountName=8:string serviceAccount=9:string "
               "automountServiceAccountToken=21:bool? nodeName=10:string hostNetwork=11:bool hostPID=12:bool "
               "hostIPC=13:bool shareProcessNamespace=27:bool? securityContext=14:PodSecurityContext "
               "imagePullSecrets=15:[]LocalObjectReference hostname=16:string subdomain=17:string "
               "affinity=18:Affinity schedulerName=19:string tolerations=22:[]Toleration "
               "hostAliases=23:[]HostAlias priorityClassName=24:string priority=25:int32? "
               "dnsConfig=26:PodDNSConfig readinessGates=28:[]PodReadinessGate runtimeClassName=29:string? "
               "enableServiceLinks=30:bool? preemptionPolicy=31:string? overhead=32:map<string,Quantity> "
               "topologySpreadConstraints=33:[]TopologySpreadConstraint setHostnameAsFQDN=35:bool? os=36:PodOS "
               "hostUsers=37:bool? schedulingGates=38:[]PodSchedulingGate resourceClaims=39:[]PodResourceClaim "
               "resources=40:ResourceRequirements hostnameOverride=41:string?",
    "Container": _CONTAINER,
    "EphemeralContainerCommon": _CONTAINER,
    "EphemeralContainer": "+ephemeralContainerCommon=1:EphemeralContainerCommon targetContainerName=2:string",
    "ContainerPort": "name=1:string hostPort=2:int32 containerPort=3:int32 protocol=4:string hostIP=5:string",
    "ContainerResizePolicy": "resourceName=1:string restartPolicy=2:string",
    "ContainerRestartRule": "action=1:string exitCodes=2:ContainerRestartRuleOnExitCodes",
    "ContainerRestartRuleOnExitCodes": "operator=1:string values=2:[]int32",
    "EnvFromSource": "prefix=1:string configMapRef=2:ConfigMapEnvSource secretRef=3:SecretEnvSource",
    "ConfigMapEnvSource": "+localObjectReference=1:LocalObjectReference optional=2:bool?",
    "SecretEnvSource": "+localObjectReference=1:LocalObjectReference optional=2:bool?",
    "EnvVar": "name=1:string value=2:string valueFrom=3:EnvVarSource",
    "EnvVarSource": "fieldRef=1:ObjectFieldSelector resourceFieldRef=2:ResourceFieldSelector "
                    "configMapKeyRef=3:ConfigMapKeySelector secretKeyRef=4:SecretKeySelector "
                    "fileKeyRef=5:FileKeySelector",
    "ObjectFieldSelector": "apiVersion=1:string fieldPath=2:string",
    "ResourceFieldSelector": "containerName=1:string resource=2:string divisor=3:Quantity",
    "ConfigMapKeySelector": "+localObjectReference=1:LocalObjectReference key=2:string optional=3:bool?",
    "SecretKeySelector": "+localObjectReference=1:LocalObjectReference key=2:string optional=3:bool?",
    "FileKeySelector": "volumeName=1:string path=2:string key=3:string optional=4:bool?",
    "ResourceRequirements": "limits=1:map<string,Quantity> requests=2:map<string,Quantity> claims=3:[]ResourceClaim",
    "ResourceClaim": "name=1:string request=2:string",
    "VolumeMount": "name=1:string readOnly=2:bool recursiveReadOnly=7:string? mountPath=3:string subPath=4:string "
                   "mountPropagation=5:string? subPathExpr=6:string",
    "VolumeDevice": "name=1:string devicePath=2:string",
    "Probe": "+handler=1:ProbeHandler initialDelaySeconds=2:int32 timeoutSeconds=3:int32 periodSeconds=4:int32 "
             "successThreshold=5:int32 failureThreshold=6:int32 terminationGracePeriodSeconds=7:int64?",
    "ProbeHandler": "exec=1:ExecAction? httpGet=2:HTTPGetAction? tcpSocket=3:TCPSocketAction? grpc=4:GRPCAction?",
    "ExecAction": "command=1:[]string",
    "HTTPGetAction": "path=1:string port=2:IntOrString host=3:string scheme=4:string httpHeaders=5:[]HTTPHeader",
    "HTTPHeader": "name=1:string value=2:string",
    "TCPSocketAction": "port=1:IntOrString host=2:string",
    "GRPCAction": "port=1:int32 service=2:string?",
    "Lifecycle": "postStart=1:LifecycleHandler preStop=2:LifecycleHandler stopSignal=3:string?",
    "LifecycleHandler": "exec=1:ExecAction? httpGet=2:HTTPGetAction? tcpSocket=3:TCPSocketAction? "
                        "sleep=4:SleepAction?",
    "SleepAction": "seconds=1:int64",
    "SecurityContext": "capabilities=1:Capabilities privileged=2:bool? seLinuxOptions=3:SELinuxOptions "
                       "windowsOptions=10:WindowsSecurityContextOptions runAsUser=4:int64? runAsGroup=8:int64? "
                       "runAsNonRoot=5:bool? readOnlyRootFilesystem=6:bool? allowPrivilegeEscalation=7:bool? "
                       "procMount=9:string? seccompProfile=11:SeccompProfile appArmorProfile=12:AppArmorProfile",
    "Capabilities": "add=1:[]string drop=2:[]string",
    "SELinuxOptions": "user=1:string role=2:string type=3:string level=4:string",
    "WindowsSecurityContextOptions": "gmsaCredentialSpecName=1:string? gmsaCredentialSpec=2:string? "
                                     "runAsUserName=3:string? hostProcess=4:bool?",
    "SeccompProfile": "type=1:string localhostProfile=2:string?",
    "AppArmorProfile": "type=1:string localhostProfile=2:string?",
    "PodSecurityContext": "seLinuxOptions=1:SELinuxOptions windowsOptions=8:WindowsSecurityContextOptions "
                          "runAsUser=2:int64? runAsGroup=6:int64? runAsNonRoot=3:bool? supplementalGroups=4:[]int64 "
                          "supplementalGroupsPolicy=12:string? fsGroup=5:int64? sysctls=7:[]Sysctl "
                          "fsGroupChangePolicy=9:string? seccompProfile=10:SeccompProfile "
                          "appArmorProfile=11:AppArmorProfile seLinuxChangePolicy=13:string?",
    "Sysctl": "name=1:string value=2:string",
    "Affinity": "nodeAffinity=1:NodeAffinity podAffinity=2:PodAffinity podAntiAffinity=3:PodAntiAffinity",
    "NodeAffinity": "requiredDuringSchedulingIgnoredDuringExecution=1:NodeSelector "
                    "preferredDuringSchedulingIgnoredDuringExecution=2:[]PreferredSchedulingTerm",
    "NodeSelector": "nodeSelectorTerms=1:[]NodeSelectorTerm",
    "NodeSelectorTerm": "matchExpressions=1:[]NodeSelectorRequirement matchFields=2:[]NodeSelectorRequirement",
    "NodeSelectorRequirement": "key=1:string operator=2:string values=3:[]string",
    "PreferredSchedulingTerm": "weight=1:int32 preference=2:NodeSelectorTerm",
    "PodAffinity": "requiredDuringSchedulingIgnoredDuringExecution=1:[]PodAffinityTerm "
                   "preferredDuringSchedulingIgnoredDuringExecution=2:[]WeightedPodAffinityTerm",
    "PodAntiAffinity": "requiredDuringSchedulingIgnoredDuringExecution=1:[]PodAffinityTerm "
                       "preferredDuringSchedulingIgnoredDuringExecution=2:[]WeightedPodAffinityTerm",
    "PodAffinityTerm": "labelSelector=1:LabelSelector namespaces=2:[]string topologyKey=3:string "
                       "namespaceSelector=4:LabelSelector matchLabelKeys=5:[]string mismatchLabelKeys=6:[]string",
    "WeightedPodAffinityTerm": "weight=1:int32 podAffinityTerm=2:PodAffinityTerm",
    "Toleration": "key=1:string operator=2:string value=3:string effect=4:string tolerationSeconds=5:int64?",
    "HostAlias": "ip=1:string hostnames=2:[]string",
    "PodDNSConfig": "nameservers=1:[]string searches=2:[]string options=3:[]PodDNSConfigOption",
    "PodDNSConfigOption": "name=1:string value=2:string?",
    "PodReadinessGate": "conditionType=1:string",
    "TopologySpreadConstraint": "maxSkew=1:int32 topologyKey=2:string whenUnsatisfiable=3:string "
                                "labelSelector=4:LabelSelector minDomains=5:int32? nodeAffinityPolicy=6:string? "
                                "nodeTaintsPolicy=7:string? matchLabelKeys=8:[]string",
    "PodOS": "name=1:string",
    "PodSchedulingGate": "name=1:string",
    "PodResourceClaim": "name=1:string resourceClaimName=3:string? resourceClaimTemplateName=4:string?",
    # volumes: the sources a pod template can reasonably carry; the deprecated in-tree cloud and
    # cluster-filesystem plugins are left out and so refused by number (see _check_known)
    "Volume": "name=1:string +volumeSource=2:VolumeSource",
    "VolumeSource": "hostPath=1:HostPathVolumeSource? emptyDir=2:EmptyDirVolumeSource? "
                    "secret=6:SecretVolumeSource? nfs=7:NFSVolumeSource? "
                    "persistentVolumeClaim=10:PersistentVolumeClaimVolumeSource? "
                    "downwardAPI=16:DownwardAPIVolumeSource? configMap=19:ConfigMapVolumeSource? "
                    "projected=26:ProjectedVolumeSource? csi=28:CSIVolumeSource? "
                    "ephemeral=29:EphemeralVolumeSource? image=30:ImageVolumeSource?",
    "HostPathVolumeSource": "path=1:string type=2:string?",
    "EmptyDirVolumeSource": "medium=1:string sizeLimit=2:Quantity?",
    "KeyToPath": "key=1:string path=2:string mode=3:int32?",
    "SecretVolumeSource": "secretName=1:string items=2:[]KeyToPath defaultMode=3:int32? optional=4:bool?",
    "ConfigMapVolumeSource": "+localObjectReference=1:LocalObjectReference items=2:[]KeyToPath "
                             "defaultMode=3:int32? optional=4:bool?",
    "NFSVolumeSource": "server=1:string path=2:string readOnly=3:bool",
    "PersistentVolumeClaimVolumeSource": "claimName=1:string readOnly=2:bool",
    "DownwardAPIVolumeFile": "path=1:string fieldRef=2:ObjectFieldSelector resourceFieldRef=3:ResourceFieldSelector "
                             "mode=4:int32?",
    "DownwardAPIVolumeSource": "items=1:[]DownwardAPIVolumeFile defaultMode=2:int32?",
    "ProjectedVolumeSource": "sources=1:[]VolumeProjection defaultMode=2:int32?",
    "VolumeProjection": "secret=1:SecretProjection? downwardAPI=2:DownwardAPIProjection? "
                        "configMap=3:ConfigMapProjection? serviceAccountToken=4:ServiceAccountTokenProjection? "
                        "clusterTrustBundle=5:ClusterTrustBundleProjection? podCertificate=6:PodCertificateProjection?",
    "SecretProjection": "+localObjectReference=1:LocalObjectReference items=2:[]KeyToPath optional=4:bool?",
    "ConfigMapProjection": "+localObjectReference=1:LocalObjectReference items=2:[]KeyToPath optional=4:bool?",
    "DownwardAPIProjection": "items=1:[]DownwardAPIVolumeFile",
    "ServiceAccountTokenProjection": "audience=1:string expirationSeconds=2:int64? path=3:string",
    "ClusterTrustBundleProjection": "name=1:string? signerName=2:string? labelSelector=3:LabelSelector "
                                    "optional=5:bool? path=4:string",
    "PodCertificateProjection": "signerName=1:string keyType=2:string maxExpirationSeconds=3:int32? "
                                "credentialBundlePath=4:string keyPath=5:string certificateChainPath=6:string",
    "CSIVolumeSource": "driver=1:string readOnly=2:bool? fsType=3:string? volumeAttributes=4:map<string,string> "
                       "nodePublishSecretRef=5:LocalObjectReference",
    "EphemeralVolumeSource": "volumeClaimTemplate=1:PersistentVolumeClaimTemplate",
    "PersistentVolumeClaimTemplate": "metadata=1:ObjectMeta spec=2:PersistentVolumeClaimSpec",
    "PersistentVolumeClaimSpec": "accessModes=1:[]string selector=4:LabelSelector resources=2:VolumeResourceRequirements "
                                 "volumeName=3:string storageClassName=5:string? volumeMode=6:string? "
                                 "dataSource=7:TypedLocalObjectReference dataSourceRef=8:TypedObjectReference "
                                 "volumeAttributesClassName=9:string?",
    "VolumeResourceRequirements": "limits=1:map<string,Quantity> requests=2:map<string,Quantity>",
    "TypedLocalObjectReference": "apiGroup=1:string? kind=2:string name=3:string",
    "TypedObjectReference": "apiGroup=1:string? kind=2:string name=3:string namespace=4:string?",
    "ImageVolumeSource": "reference=1:string pullPolicy=2:string",
    "PodTemplateSpec": "metadata=1:ObjectMeta spec=2:PodSpec",
    "RollingUpdateDeployment": "maxUnavailable=1:IntOrString? maxSurge=2:IntOrString?",
    "DeploymentStrategy": "type=1:string rollingUpdate=2:RollingUpdateDeployment",
    "DeploymentSpec": "replicas=1:int32? selector=2:LabelSelector template=3:PodTemplateSpec "
                      "strategy=4:DeploymentStrategy minReadySeconds=5:int32 revisionHistoryLimit=6:int32? "
                      "paused=7:bool progressDeadlineSeconds=9:int32?",
    "Deployment": "metadata=1:ObjectMeta spec=2:DeploymentSpec",
    # k8s.io/api/batch/v1 (kubectl create job|cronjob, create job --from=cronjob/x)
    "JobSpec": "parallelism=1:int32? completions=2:int32? activeDeadlineSeconds=3:int64? selector=4:LabelSelector "
               "manualSelector=5:bool? template=6:PodTemplateSpec backoffLimit=7:int32? "
               "ttlSecondsAfterFinished=8:int32? completionMode=9:string? suspend=10:bool? "
               "backoffLimitPerIndex=12:int32? maxFailedIndexes=13:int32? podReplacementPolicy=14:string? "
               "managedBy=15:string? podFailurePolicy=11:PodFailurePolicy successPolicy=16:SuccessPolicy",
    "PodFailurePolicy": "rules=1:[]PodFailurePolicyRule",
    "PodFailurePolicyRule": "action=1:string onExitCodes=2:PodFailurePolicyOnExitCodesRequirement "
                            "onPodConditions=3:[]PodFailurePolicyOnPodConditionsPattern",
    "PodFailurePolicyOnExitCodesRequirement": "containerName=1:string? operator=2:string values=3:[]int32",
    "PodFailurePolicyOnPodConditionsPattern": "type=1:string status=2:string",
    "SuccessPolicy": "rules=1:[]SuccessPolicyRule",
    "SuccessPolicyRule": "succeededIndexes=1:string? succeededCount=2:int32?",
    "Job": "metadata=1:ObjectMeta spec=2:JobSpec",
    "JobTemplateSpec": "metadata=1:ObjectMeta spec=2:JobSpec",
    "CronJobSpec": "schedule=1:string startingDeadlineSeconds=2:int64? concurrencyPolicy=3:string suspend=4:bool? "
                   "jobTemplate=5:JobTemplateSpec successfulJobsHistoryLimit=6:int32? "
                   "failedJobsHistoryLimit=7:int32? timeZone=8:string?",
    "CronJob": "metadata=1:ObjectMeta spec=2:CronJobSpec",
}

# kind -> (message, apiVersion used when the envelope leaves it empty)
KINDS: dict[str, tuple[str, str]] = {
    "Secret": ("Secret", "v1"),
    "ConfigMap": ("ConfigMap", "v1"),
    "Namespace": ("Namespace", "v1"),
    "ServiceAccount": ("ServiceAccount", "v1"),
    "TokenRequest": ("TokenRequest", "authentication.k8s.io/v1"),
    "TokenReview": ("TokenReview", "authentication.k8s.io/v1"),
    "CertificateSigningRequest": ("CertificateSigningRequest", "certificates.k8s.io/v1"),
    "Eviction": ("Eviction", "policy/v1"),
    "Role": ("Role", "rbac.authorization.k8s.io/v1"),
    "ClusterRole": ("ClusterRole", "rbac.authorization.k8s.io/v1"),
    "RoleBinding": ("RoleBinding", "rbac.authorization.k8s.io/v1"),
    "ClusterRoleBinding": ("ClusterRoleBinding", "rbac.authorization.k8s.io/v1"),
    "SelfSubjectAccessReview": ("SelfSubjectAccessReview", "authorization.k8s.io/v1"),
    "SubjectAccessReview": ("SubjectAccessReview", "authorization.k8s.io/v1"),
    "Deployment": ("Deployment", "apps/v1"),
    "Job": ("Job", "batch/v1"),
    "CronJob": ("CronJob", "batch/v1"),
    "DeleteOptions": ("DeleteOptions", "v1"),
}

_PKG = "pykubelet.k8s"
_SCALARS = {"string": FieldDescriptor.TYPE_STRING, "bytes": FieldDescriptor.TYPE_BYTES,
            "bool": FieldDescriptor.TYPE_BOOL, "int32": FieldDescriptor.TYPE_INT32,
            "int64": FieldDescriptor.TYPE_INT64}
_POINTER: set[tuple[str, str]] = set()  # (message, json name) of Go pointer fields
_INLINE: set[tuple[str, str]] = set()  # (message, json name) of Go embedded structs (json:",inline")


class UnsupportedKind(ValueError):
    """A well-formed envelope whose kind we have no schema for (the server answers 415)."""


def _set_type(f: descriptor_pb2.FieldDescriptorProto, typ: str) -> None:
    if typ in _SCALARS:
        f.type = _SCALARS[typ]  # type: ignore[assignment]
    else:
        if typ not in SCHEMA:
            raise KeyError(f"schema refers to unknown message {typ}")
        f.type = FieldDescriptor.TYPE_MESSAGE  # type: ignore[assignment]
        f.type_name = f".{_PKG}.{typ}"


def _build() -> dict[str, type[Message]]:
    """Compile SCHEMA into a private descriptor pool (private so it cannot clash with anyone's
    generated code registered in the default pool)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="pykubelet_k8s.proto", package=_PKG, syntax="proto2")
    for msg_name, spec in SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        for item in spec.split():
            name, rest = item.split("=", 1)
            num, typ = rest.split(":", 1)
            if name.startswith("+"):
                name = name[1:]
                _INLINE.add((msg_name, name))
            if typ.endswith("?"):
                typ = typ[:-1]
                _POINTER.add((msg_name, name))
            f = msg.field.add(name=name, number=int(num), json_name=name)
            f.label = FieldDescriptor.LABEL_OPTIONAL  # type: ignore[assignment]
            if typ.startswith("[]"):
                f.label = FieldDescriptor.LABEL_REPEATED  # type: ignore[assignment]
                _set_type(f, typ[2:])
            elif typ.startswith("map<"):
                key_t, val_t = typ[4:-1].split(",")
                entry = msg.nested_type.add(name=name[0].upper() + name[1:] + "Entry")
                entry.options.map_entry = True
                for en, (ename, et) in enumerate((("key", key_t), ("value", val_t)), 1):
                    ef = entry.field.add(name=ename, number=en, json_name=ename)
                    ef.label = FieldDescriptor.LABEL_OPTIONAL  # type: ignore[assignment]
                    _set_type(ef, et)
                f.label = FieldDescriptor.LABEL_REPEATED  # type: ignore[assignment]
                f.type = FieldDescriptor.TYPE_MESSAGE  # type: ignore[assignment]
                f.type_name = f".{_PKG}.{msg_name}.{entry.name}"
            else:
                _set_type(f, typ)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PKG}.{n}")) for n in SCHEMA}


MESSAGES = _build()


def _rfc3339(t: dict[str, Any]) -> str | None:
    secs = int(t.get("seconds", 0))
    if not secs and not t.get("nanos"):
        return None  # the zero metav1.Time, which Kubernetes JSON writes as null
    return dt.datetime.fromtimestamp(secs, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(fd: FieldDescriptor, v: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_INT64:
        return int(v)
    if fd.type != FieldDescriptor.TYPE_MESSAGE:
        return v
    sub = fd.message_type
    assert sub is not None
    if sub.name == "Time":
        return _rfc3339(v)
    if sub.name == "FieldsV1":
        raw = v.get("Raw")
        return json.loads(base64.b64decode(raw)) if raw else None
    if sub.name == "ExtraValue":
        return list(v.get("items", []))
    if sub.name == "Quantity":  # resource.Quantity is its canonical string in JSON ("500m", "1Gi")
        return v.get("string") or None
    if sub.name == "IntOrString":  # a JSON number or string, by its type (0 Int, 1 String)
        return v.get("strVal", "") if int(v.get("type", 0)) == 1 else int(v.get("intVal", 0))
    return _fix(sub, v)


def _fix(desc: Descriptor, d: dict[str, Any]) -> dict[str, Any]:
    """MessageToDict output -> Kubernetes JSON for one message (see the module docstring)."""
    out: dict[str, Any] = {}
    for name, v in d.items():
        fd = desc.fields_by_name[name]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            out[name] = {k: _value(vfd, x) for k, x in v.items()}
            continue
        if isinstance(v, list):  # repeated (MessageToDict omits empty ones)
            out[name] = [_value(fd, x) for x in v]
            continue
        val = _value(fd, v)
        if (desc.name, name) in _INLINE:
            out.update(val)
            continue
        if val is None or ((desc.name, name) not in _POINTER and val in ("", 0, False, {})):
            continue
        out[name] = val
    return out


def _parse(msg_name: str, data: bytes) -> Message:
    m = MESSAGES[msg_name]()
    try:
        m.ParseFromString(data)
    except (DecodeError, RuntimeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed protobuf {msg_name}: {e}") from e
    return m


def _check_strings(msg: Message) -> None:
    """Reject invalid UTF-8 in string fields.  proto2 parsing does not validate it; the upb runtime
    then hands back ``bytes``, which MessageToDict would silently turn into the text "b'...'"."""
    def one(fd: FieldDescriptor, x: Any) -> None:
        if fd.type == FieldDescriptor.TYPE_STRING and not isinstance(x, str):
            raise ValueError(f"invalid UTF-8 in string field {fd.full_name}")
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            _check_strings(x)

    for fd, v in msg.ListFields():
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry:
            for k, x in v.items():
                one(mt.fields_by_name["key"], k)
                one(mt.fields_by_name["value"], x)
        elif isinstance(v, str | bytes | int | float | Message):
            one(fd, v)
        else:
            for x in v:
                one(fd, x)


_VARINT, _FIXED64, _LENGTH, _GROUP, _FIXED32 = 0, 1, 2, 3, 5


def _is_zero(wire_type: int, data: Any) -> bool:
    """An unknown field that carries nothing: Go's marshallers write every non-pointer field, so
    kubectl sends ``resources: {}`` or a zero ``status``; Kubernetes JSON omits those, so dropping
    them loses nothing. A non-empty string or any non-zero number is data."""
    if wire_type in (_VARINT, _FIXED64, _FIXED32):
        return data == 0
    if wire_type == _GROUP:
        return all(_is_zero(f.wire_type, f.data) for f in data)
    if wire_type != _LENGTH:
        return False
    if not data:
        return True
    try:  # read it as a message of unknown fields only; a string rarely parses, and then not as zeros
        inner = empty_pb2.Empty.FromString(data)
    except (DecodeError, RuntimeError):
        return False
    return all(_is_zero(f.wire_type, f.data) for f in unknown_fields.UnknownFieldSet(inner))


def _check_known(msg: Message, path: str, *, top: bool = False) -> None:
    """Refuse fields the schema table does not list: the runtime would keep them as unknown fields
    and MessageToDict would drop them, so an object would be stored without, say, its volumes.
    One exception: an object's ``status`` (field 3 beside ``spec`` = 2 in every API type), which Go
    clients send zero-valued on create and which a create ignores anyway."""
    numbers = {f.field_number for f in unknown_fields.UnknownFieldSet(msg) if not _is_zero(f.wire_type, f.data)}
    by_number = msg.DESCRIPTOR.fields_by_number
    if top and 3 not in by_number and 2 in by_number and by_number[2].name == "spec":
        numbers.discard(3)
    unknown = sorted(numbers)
    if unknown:
        raise UnsupportedKind(f"protobuf field number(s) {', '.join(map(str, unknown))} of {path} "
                              f"({msg.DESCRIPTOR.name}) are not known to this server; nothing was stored; "
                              "send the object as application/json")
    for fd, v in msg.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry:
            items = [x for x in v.values() if isinstance(x, Message)]
        elif isinstance(v, Message):
            items = [v]
        else:
            items = list(v)
        for x in items:
            _check_known(x, f"{path}.{fd.name}")


def to_json(msg: Message) -> dict[str, Any]:
    """A parsed message of this module as Kubernetes JSON (without apiVersion/kind)."""
    _check_strings(msg)
    _check_known(msg, msg.DESCRIPTOR.name, top=True)
    try:
        d = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    except (ValueError, UnicodeDecodeError) as e:  # e.g. invalid UTF-8 in a string field
        raise ValueError(f"malformed protobuf {msg.DESCRIPTOR.name}: {e}") from e
    return _fix(msg.DESCRIPTOR, d)


def unwrap(raw: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw object bytes) from a ``k8s\\0`` runtime.Unknown envelope."""
    if not raw.startswith(MAGIC):
        raise ValueError("missing the k8s protobuf magic prefix")
    env = _parse("Unknown", raw[len(MAGIC):])
    _check_strings(env)
    if env.contentEncoding:  # type: ignore[attr-defined]
        raise ValueError(f"unsupported protobuf contentEncoding {env.contentEncoding!r}")  # type: ignore[attr-defined]
    tm = env.typeMeta  # type: ignore[attr-defined]
    return tm.apiVersion, tm.kind, env.raw  # type: ignore[attr-defined]


def decode_object(raw: bytes) -> dict[str, Any]:
    """A ``k8s\\0``-enveloped object as Kubernetes JSON, apiVersion and kind included.

    ``UnsupportedKind`` for kinds without a schema, ``ValueError`` for malformed bytes."""
    api_version, kind, body = unwrap(raw)
    entry = KINDS.get(kind)
    if entry is None:
        raise UnsupportedKind(f"decoding {kind or 'an object without kind'} from protobuf is not supported; "
                              "send it as application/json")
    msg_name, default_av = entry
    return {"apiVersion": api_version or default_av, "kind": kind, **to_json(_parse(msg_name, body))}


def encode_object(obj_msg: Message, api_version: str, kind: str) -> bytes:
    """The wire form kubectl sends (for tests and tools): magic + Unknown{typeMeta, raw}."""
    env = MESSAGES["Unknown"]()
    env.typeMeta.apiVersion = api_version  # type: ignore[attr-defined]
    env.typeMeta.kind = kind  # type: ignore[attr-defined]
    env.raw = obj_msg.SerializeToString()  # type: ignore[attr-defined]
    env.contentEncoding = ""  # type: ignore[attr-defined]
    env.contentType = ""  # type: ignore[attr-defined]
    return MAGIC + env.SerializeToString()


def decode_delete_options(raw: bytes) -> dict[str, Any]:
    """DeleteOptions JSON from a protobuf body; ``ValueError`` when malformed or another kind."""
    if raw.startswith(MAGIC):
        obj = decode_object(raw)
        if obj["kind"] != "DeleteOptions":
            raise ValueError(f"expected DeleteOptions, got {obj['kind']}")
        obj.pop("apiVersion")
        obj.pop("kind")
        return obj
    return to_json(_parse("DeleteOptions", raw))
