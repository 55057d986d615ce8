{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The top-level stream interface: a network core on AXI4-Stream style ports.

A core is a 'Stream' from input beats (@Vec c a@, one beat = the last axis of
the input tensor) to output beats. A classifier's core outputs one result per
image (scores and the predicted class: 'axiStream'); a core whose output is an
image or a sequence outputs @j@ beats per image, each the last axis of the
output tensor ('axiStreamBeats'). Both put the core on separate ports, as an
FPGA project expects them:

* slave (input) side: @s_axis_tdata@, @s_axis_tvalid@, @s_axis_tlast@ in,
  @s_axis_tready@ out; @k@ beats make one image, in row-major order.
* master (output) side: @m_axis_tdata@, @m_axis_tvalid@, @m_axis_tlast@ out,
  @m_axis_tready@ in; @j@ beats per image (one for a classifier), in row-major
  order, @m_axis_tlast@ high on an image's last.
* @tlast_error@ out: sticky framing error (see below).

= Packing (AXI convention: element 0 in the least significant bits)

* @s_axis_tdata = {x[c-1], ..., x[1], x[0]}@, each element its raw
  two's-complement integer; an output beat of an image likewise.
* a classifier's @m_axis_tdata = {class, score[m-1], ..., score[0]}@: score 0
  in the lowest bits, the class index (@clog2 m@ bits, unsigned) on top.

= Handshake

A beat moves in a cycle where tvalid and tready are both 1 at the rising clock
edge. The core never drops @m_axis_tvalid@ before its beat has moved and keeps
@m_axis_tdata@ stable meanwhile; @s_axis_tready@ is low whenever the core
cannot take a beat (a layer busy, or the output held by a low
@m_axis_tready@), so nothing is lost or duplicated. Neither valid depends
combinationally on the ready it is paired with.

@en@ (the Clash clock enable) freezes the whole core when low; 'axiStream'
then also holds @s_axis_tready@ and @m_axis_tvalid@ low, so no handshake can
complete while the core cannot register it. Tie @en@ high in an AXI design
(dropping it while @m_axis_tvalid@ is high would withdraw a valid beat).

= Framing: what @s_axis_tlast@ does

The core frames images by counting beats (@k@ per image), not by
@s_axis_tlast@: the hardware needs exactly @k@ beats anyway, and a count cannot
be confused by a glitching sideband. @s_axis_tlast@ is /checked/: if a beat
moves with tlast high where the count says it is not an image's last beat, or
low on an image's last beat, @tlast_error@ goes high and stays high until
reset. The data path ignores the error (the stream keeps flowing with the
count's framing); software reads it as a status bit. With @k = 1@ (a vector
input) every beat is an image's last: drive @s_axis_tlast@ high, or ignore
@tlast_error@ if the source has no tlast.
-}
module K2C.Axi
  ( -- * Ports
    AxiIn
  , AxiOut
  , BeatData
  , ResultData
    -- * The adapter
  , axiStream
  , axiStreamBeats
    -- * The two sides apart (a core of several outputs: one master port each)
  , axiSlave
  , axiMaster
    -- * Packing (shared with the simulation harness and testbenches)
  , packBeat
  , unpackBeat
  , packResult
  , unpackResult
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)

-- | @s_axis_tdata@: @c@ values, element 0 in the least significant bits.
type BeatData c a = BitVector (c * BitSize a)

-- | @m_axis_tdata@: the class index on top of @m@ scores (score 0 lowest).
type ResultData m o = BitVector (BitSize (Index m) + m * BitSize o)

-- | The input ports after clk, rst, en:
-- @s_axis_tdata -> s_axis_tvalid -> s_axis_tlast -> m_axis_tready -> ...@
type AxiIn dom c a r
  =  Signal dom (BeatData c a)  -- s_axis_tdata
  -> Signal dom Bit             -- s_axis_tvalid
  -> Signal dom Bit             -- s_axis_tlast
  -> Signal dom Bit             -- m_axis_tready
  -> r

-- | The output ports: @(s_axis_tready, m_axis_tdata, m_axis_tvalid,
-- m_axis_tlast, tlast_error)@; @m_axis_tdata@ is a @d@ ('ResultData' or 'BeatData').
type AxiOut dom d =
  ( Signal dom Bit  -- s_axis_tready
  , Signal dom d    -- m_axis_tdata
  , Signal dom Bit  -- m_axis_tvalid
  , Signal dom Bit  -- m_axis_tlast
  , Signal dom Bit  -- tlast_error
  )

-- | Element 0 in the least significant bits (Clash's own 'pack' puts it on top).
packBeat :: (KnownNat c, BitPack a) => Vec c a -> BeatData c a
packBeat = pack . reverse

unpackBeat :: (KnownNat c, BitPack a) => BeatData c a -> Vec c a
unpackBeat = reverse . unpack

-- | @{class, score[m-1], ..., score[0]}@.
packResult :: (KnownNat m, 1 <= m, BitPack o) => (Vec m o, Index m) -> ResultData m o
packResult (scores, cls) = pack (cls, reverse scores)

unpackResult :: (KnownNat m, 1 <= m, BitPack o) => ResultData m o -> (Vec m o, Index m)
unpackResult bits = (reverse scores, cls)
  where
    (cls, scores) = unpack bits

-- | Put a classifier's core on AXI4-Stream ports: one output beat per image.
-- @k@ is the number of input beats per image (type level); the core sees only
-- valid beats and the downstream ready. No register is added on the data
-- path: latency and throughput are the core's own.
axiStream
  :: forall dom k c a m o
   . ( HiddenClockResetEnable dom
     , KnownNat k, 1 <= k, KnownNat c, KnownNat m, 1 <= m
     , BitPack a, BitPack o )
  => SNat k
  -> Stream dom (Vec c a) (Vec m o, Index m)
  -> AxiIn dom c a (AxiOut dom (ResultData m o))
axiStream k = axiFrames k (SNat @1) packResult

-- | Put a core whose output is an image or a sequence on AXI4-Stream ports:
-- @j@ output beats of @n@ values per image, @m_axis_tlast@ on the last.
axiStreamBeats
  :: forall dom k c a j n o
   . ( HiddenClockResetEnable dom
     , KnownNat k, 1 <= k, KnownNat c, KnownNat j, 1 <= j, KnownNat n
     , BitPack a, BitPack o )
  => SNat k
  -> SNat j
  -> Stream dom (Vec c a) (Vec n o)
  -> AxiIn dom c a (AxiOut dom (BeatData n o))
axiStreamBeats k j = axiFrames k j packBeat

-- | The adapter both share: @k@ input beats and @j@ output beats per image,
-- each output packed by @packOut@. The output beat count only places
-- @m_axis_tlast@; like the input's, it frames by counting.
axiFrames
  :: forall dom k c a j r d
   . ( HiddenClockResetEnable dom
     , KnownNat k, 1 <= k, KnownNat c, KnownNat j, 1 <= j
     , BitPack a, Num d )
  => SNat k
  -> SNat j
  -> (r -> d)
  -> Stream dom (Vec c a) r
  -> AxiIn dom c a (AxiOut dom d)
axiFrames SNat SNat packOut core sData sValid sLast mReady =
  (boolToBit <$> sReady, mData, boolToBit <$> mValid, boolToBit <$> mLast, boolToBit <$> errorFlag)
  where
    enabled = fromEnable hasEnable
    downReady = enabled .&&. (bitToBool <$> mReady)
    beatIn  = mux (bitToBool <$> sValid) (Just . unpackBeat <$> sData) (pure Nothing)
    (result, coreReady) = core (beatIn, downReady)

    sReady  = enabled .&&. coreReady
    mValid  = enabled .&&. (isJust <$> result)
    mData   = maybe 0 packOut <$> result

    -- Framing check: which beat of the image moves next, and a sticky error.
    moved      = sReady .&&. (bitToBool <$> sValid)
    beat       = regEn (0 :: Index k) moved (nextBeat <$> beat)
    lastBeat   = (== maxBound) <$> beat
    misplaced  = moved .&&. (lastBeat ./=. (bitToBool <$> sLast))
    errorFlag  = register False (errorFlag .||. misplaced)

    -- Which output beat of the image is shown: tlast on the image's last.
    outMoved = mValid .&&. downReady
    outBeat  = regEn (0 :: Index j) outMoved (nextBeat <$> outBeat)
    mLast    = mValid .&&. ((== maxBound) <$> outBeat)

    nextBeat :: (Eq i, Bounded i, Num i) => i -> i
    nextBeat i | i == maxBound = 0
               | otherwise     = i + 1

-- | The slave side of the adapter for a core with several master ports: @k@
-- beats per image, the framing check ('axiFrames'). Given the core's ready,
-- the beats the core sees, @s_axis_tready@ and @tlast_error@.
axiSlave
  :: forall dom k c a
   . (HiddenClockResetEnable dom, KnownNat k, 1 <= k, KnownNat c, BitPack a)
  => SNat k
  -> Signal dom (BeatData c a)  -- s_axis_tdata
  -> Signal dom Bit             -- s_axis_tvalid
  -> Signal dom Bit             -- s_axis_tlast
  -> Signal dom Bool            -- the core's ready
  -> (Signal dom (Maybe (Vec c a)), Signal dom Bit, Signal dom Bit)
axiSlave SNat sData sValid sLast coreReady =
  (beatIn, boolToBit <$> sReady, boolToBit <$> errorFlag)
  where
    enabled    = fromEnable hasEnable
    beatIn     = mux (bitToBool <$> sValid) (Just . unpackBeat <$> sData) (pure Nothing)
    sReady     = enabled .&&. coreReady
    moved      = sReady .&&. (bitToBool <$> sValid)
    beat       = regEn (0 :: Index k) moved (nextIndex <$> beat)
    lastBeat   = (== maxBound) <$> beat
    misplaced  = moved .&&. (lastBeat ./=. (bitToBool <$> sLast))
    errorFlag  = register False (errorFlag .||. misplaced)

-- | One master port of a core with several outputs: @j@ beats per image, each
-- packed by @packOut@ ('axiFrames'). Given the core's output and
-- @m_axis_tready@: the ready the core's output sees, @m_axis_tdata@,
-- @m_axis_tvalid@ and @m_axis_tlast@.
axiMaster
  :: forall dom j r d
   . (HiddenClockResetEnable dom, KnownNat j, 1 <= j, Num d)
  => SNat j
  -> (r -> d)
  -> Signal dom (Maybe r)
  -> Signal dom Bit             -- m_axis_tready
  -> (Signal dom Bool, Signal dom d, Signal dom Bit, Signal dom Bit)
axiMaster SNat packOut result mReady =
  (downReady, mData, boolToBit <$> mValid, boolToBit <$> mLast)
  where
    enabled   = fromEnable hasEnable
    downReady = enabled .&&. (bitToBool <$> mReady)
    mValid    = enabled .&&. (isJust <$> result)
    mData     = maybe 0 packOut <$> result
    outMoved  = mValid .&&. downReady
    outBeat   = regEn (0 :: Index j) outMoved (nextIndex <$> outBeat)
    mLast     = mValid .&&. ((== maxBound) <$> outBeat)

nextIndex :: (Eq i, Bounded i, Num i) => i -> i
nextIndex i | i == maxBound = 0
            | otherwise     = i + 1
