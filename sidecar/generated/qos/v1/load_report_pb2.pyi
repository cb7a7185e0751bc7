from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LoadReport(_message.Message):
    __slots__ = ("pod_id", "model", "kv_cache_usage", "kv_blocks_total", "num_requests_running", "num_requests_waiting", "observed_unix_ms", "scheduling_policy", "pool", "capacity_tokens_per_second", "kv_block_size", "kv_cache_unknown", "dialect", "admission_rejections")
    POD_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_WAITING_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_POLICY_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    pod_id: str
    model: str
    kv_cache_usage: float
    kv_blocks_total: int
    num_requests_running: int
    num_requests_waiting: int
    observed_unix_ms: int
    scheduling_policy: str
    pool: str
    capacity_tokens_per_second: float
    kv_block_size: int
    kv_cache_unknown: bool
    dialect: str
    admission_rejections: int
    def __init__(self, pod_id: _Optional[str] = ..., model: _Optional[str] = ..., kv_cache_usage: _Optional[float] = ..., kv_blocks_total: _Optional[int] = ..., num_requests_running: _Optional[int] = ..., num_requests_waiting: _Optional[int] = ..., observed_unix_ms: _Optional[int] = ..., scheduling_policy: _Optional[str] = ..., pool: _Optional[str] = ..., capacity_tokens_per_second: _Optional[float] = ..., kv_block_size: _Optional[int] = ..., kv_cache_unknown: bool = ..., dialect: _Optional[str] = ..., admission_rejections: _Optional[int] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("ttl_ms",)
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    ttl_ms: int
    def __init__(self, ttl_ms: _Optional[int] = ...) -> None: ...
