{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             MultiParamTypeClasses, FlexibleInstances, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The weight memories the filter engine ("K2C.Engine") walks: the ROM of a
layer's weight file ('WeightRom', "K2C.Memory", walked by
"K2C.EngineWeights"), or the same file in a block RAM a host writes at run
time ('WeightRam', written from "K2C.WeightBus"). The engine's code is the
same for both; the memory chooses its walk ('WeightMemory').

= A writable memory

A 'WeightRam' is walked as the ROM is ("K2C.EngineWeights"): the address a
register of its own, one word ahead of the steps, the RAM read only in steps,
word 0 held between windows. Writes add three things, all on registers.
Clash's block RAM writes only when enabled, so a write (its port's valid, a
register of 'K2C.WeightBus.writable') enables it too, and so also reads, at
the address register, whichever word that is. A flag @stale@ says the word
held may not be word 0 as it is now: set by any enabled read but one at word
0 without a write (a step's, a write's) and by a write, cleared by a read at
word 0 without a write (a window's last step reads word 0, so a window leaves
it clear). While idle and stale, the address goes to word 0, the RAM reads it
(@refresh@), and the address goes back to word 1: two idle cycles after the
last write, or after whatever left a stale word, the RAM holds word 0 with
what was written. A register @atZero@ holds whether the address is word 0,
computed from the address's next value. None of this is between the address
register and the RAM: it is on the address register's input and on the
enable, which comes from four flip-flops.

A window whose first step comes while this is under way (the address at word 0)
would read its words one step late, and so would windows right after it, up
to the engine's next two idle cycles. The top entity closes its image input
during a weight message and for 'K2C.WeightBus.QuietCycles' cycles after
('K2C.WeightBus.closedWhile'), and the host writes between images, so an image
sent after a message never meets it.

= Hardware

The RAM: the ROM's words and width, a simple dual-port block RAM (one read
port, one write port) initialised from the file; the address register and two
one-bit registers (@stale@, @atZero@). The write port's register is
'K2C.WeightBus.writable''s.
-}
module K2C.WeightMemory
  ( WeightMemory (..)
  , WeightRam (..)
  , readWritable
  ) where

import Clash.Prelude

import K2C.EngineWeights (stepWeights)
import K2C.Memory (Neuron, WeightRom (..))
import K2C.Window (nextIndex)

-- | A weight memory the engine walks ('K2C.EngineWeights.stepWeights' for a
-- ROM, 'ramWeights' for a writable one).
class WeightMemory m dom where
  -- | The memory word of the current step, given whether this cycle is a
  -- step; between windows, word 0.
  walkWeights
    :: ( HiddenClockResetEnable dom
       , KnownNat n, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
    => m n p ch w bias
    -> Signal dom Bool
    -> Signal dom (Vec p (Neuron ch w bias))

instance WeightMemory WeightRom dom where
  walkWeights = stepWeights

instance dom ~ dom' => WeightMemory (WeightRam dom) dom' where
  walkWeights = ramWeights

-- | A weight memory written at run time: the ROM file it starts from, and its
-- write port, one word a cycle (the address, and the word laid out as the
-- file's, "K2C.Memory").
data WeightRam dom (words :: Nat) (p :: Nat) (ch :: Nat) w bias =
  WeightRam (WeightRom words p ch w bias) (Signal dom (Maybe (Index words, Vec p (Neuron ch w bias))))

-- | 'K2C.Memory.readWeights' of a 'WeightRam': a block RAM with the file's
-- contents, read at @address@ (the answer one cycle later) and written from
-- its port. The hidden enable gates reads and writes alike, as Clash's block
-- RAM does.
readWritable
  :: forall dom words p ch w bias
   . ( HiddenClock dom, HiddenEnable dom
     , KnownNat words, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRam dom words p ch w bias
  -> Signal dom (Index words)
  -> Signal dom (Vec p (Neuron ch w bias))
readWritable (WeightRam (WeightRom path) writes) address =
  unpack <$> blockRamFile (SNat @words) path address (fmap (fmap pack) <$> writes)

-- | The walk of a writable memory (the module header, "A writable memory").
ramWeights
  :: forall dom n p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat n, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRam dom n p ch w bias
  -> Signal dom Bool
  -> Signal dom (Vec p (Neuron ch w bias))
ramWeights weights@(WeightRam _ writes) busy = andEnable enable (readWritable weights ahead)
  where
    writing   = maybe False (const True) <$> writes
    enable    = busy .||. writing .||. refresh
    -- idle, the held word perhaps not word 0 as it is now, the address at word 0: read it
    refresh   = (not <$> busy) .&&. stale .&&. atZero
    -- the held word is word 0 as it is now after a read there without a write; it may not
    -- be after any other read (a step, a write's) or a write
    fresh     = enable .&&. atZero .&&. (not <$> writing)
    staleNext = mux fresh (pure False) (enable .||. stale)
    stale     = register True staleNext  -- from reset: read word 0 first
    aheadNext = mux busy (nextIndex <$> ahead) (mux staleNext (pure 0) (pure (nextIndex 0)))
    ahead     = register (0 :: Index n) aheadNext
    atZero    = register True ((== 0) <$> aheadNext)
